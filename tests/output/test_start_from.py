"""dit_lora.output.start_from: reading an adapter to start a run from (the runs themselves: tests/e2e/
test_network_weights.py)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from dit_lora.core.errors import UserError
from dit_lora.output import start_from


def _lora(prefix: str = "transformer.", rank: int = 4) -> dict[str, torch.Tensor]:
    return {f"{prefix}blocks.0.attn.to_q.lora_A.weight": torch.ones(rank, 8),
            f"{prefix}blocks.0.attn.to_q.lora_B.weight": torch.full((8, rank), 2.0)}


def test_a_diffusers_file_is_read_with_its_metadata_config(tmp_path):
    path = tmp_path / "pytorch_lora_weights.safetensors"
    meta = {"lora_adapter_metadata": json.dumps({"transformer.r": 4, "transformer.lora_alpha": 8})}
    save_file(_lora(), str(path), metadata=meta)
    state, config, form = start_from.read_adapter(path, None)
    assert sorted(state) == ["blocks.0.attn.to_q.lora_A.weight", "blocks.0.attn.to_q.lora_B.weight"]
    assert config == {"r": 4, "lora_alpha": 8} and form == "diffusers/PEFT names"
    assert start_from.read_adapter(tmp_path, None)[0].keys() == state.keys()  # the folder holding it


def test_a_peft_folder_is_read_with_its_adapter_config(tmp_path):
    save_file(_lora("base_model.model."), str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 2}))
    state, config, form = start_from.read_adapter(tmp_path, None)
    assert "blocks.0.attn.to_q.lora_B.weight" in state and config["lora_alpha"] == 2 and form == "PEFT adapter"


def test_rescaling_keeps_each_layers_update():
    """The file's scale 8/4 = 2 and the run's 3/4: lora_B grows by 8/3, lora_A stays."""
    state = start_from._unprefixed(_lora())
    out = start_from._rescaled(state, {"r": 4, "lora_alpha": 8}, {"peft_type": "LORA", "r": 4, "lora_alpha": 3})
    assert torch.equal(out["blocks.0.attn.to_q.lora_A.weight"], state["blocks.0.attn.to_q.lora_A.weight"])
    torch.testing.assert_close(out["blocks.0.attn.to_q.lora_B.weight"], torch.full((8, 4), 2.0 * 2 / 0.75))
    same = start_from._rescaled(state, None, {"peft_type": "LORA", "r": 4, "lora_alpha": 4})  # scale 1 both
    assert same["blocks.0.attn.to_q.lora_B.weight"] is state["blocks.0.attn.to_q.lora_B.weight"]


def test_kohya_names_go_through_the_pipelines_converter_and_its_alphas_scale_each_layer(tmp_path):
    """A stand-in pipeline class in diffusers' shape: ``lora_state_dict`` handing back (state, network alphas)."""
    path = tmp_path / "kohya.safetensors"
    save_file({"lora_unet_blocks_0_attn_to_q.lora_down.weight": torch.ones(4, 8),
               "lora_unet_blocks_0_attn_to_q.lora_up.weight": torch.ones(8, 4)}, str(path))

    class Pipeline:
        @staticmethod
        def lora_state_dict(given):
            assert given == str(path)
            return _lora(), {"transformer.blocks.0.attn.to_q.alpha": torch.tensor(2.0)}

    state, config, form = start_from.read_adapter(path, Pipeline)
    assert "converted by diffusers" in form and "blocks.0.attn.to_q.lora_A.weight" in state
    from dit_lora.output.adapter import lora_scale

    assert lora_scale(config, "blocks.0.attn.to_q") == 0.5  # alpha 2 over the file's rank 4


def test_what_cannot_be_read_is_refused_in_one_paragraph(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x")
    with pytest.raises(UserError, match="safetensors only"):
        start_from.read_adapter(tmp_path / "a.bin", None)
    kohya = tmp_path / "k.safetensors"
    save_file({"lora_unet_x.lora_down.weight": torch.ones(2, 2)}, str(kohya))
    with pytest.raises(UserError, match="no diffusers converter"):
        start_from.read_adapter(kohya, None)
    for name in ("one.safetensors", "two.safetensors"):
        save_file(_lora(), str(tmp_path / name))
    with pytest.raises(UserError, match="without one adapter file"):
        start_from.read_adapter(tmp_path, None)


def test_the_type_is_read_from_the_keys():
    assert start_from._kind_of(["a.lora_A.weight", "a.lora_B.weight"]) == "lora"
    assert start_from._kind_of(["a.lora_A.weight", "a.lora_magnitude_vector"]) == "dora"
    assert start_from._kind_of(["a.lokr_w1", "a.lokr_w2"]) == "lokr" and start_from._kind_of(["a.hada_w1_a"]) == "loha"


def test_a_file_the_pipelines_converter_cannot_read_is_one_paragraph(tmp_path):
    kohya = tmp_path / "other.safetensors"
    save_file({"lora_unet_x.lora_down.weight": torch.ones(2, 2)}, str(kohya))

    class Pipeline:
        @staticmethod
        def lora_state_dict(given):
            raise ValueError("state_dict should be empty")

    with pytest.raises(UserError, match="could not read it .ValueError: state_dict should be empty.. It may be another"):
        start_from.read_adapter(kohya, Pipeline)
