"""The adapter file, reload and export refusal of each --lora_type (no training: a seeded stand-in for
trained weights on the tiny Sana transformer). DoRA goes through diffusers' own saver and ``load_lora_weights``
(magnitudes included); LoKr/LoHa through PEFT's format and PEFT's loading, every tensor landing."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.modeling import trainables
from dit_lora.output.adapter import load_adapter_files, write_adapter
from dit_lora.output.names import ADAPTER_FILE, PEFT_ADAPTER_FILE, PEFT_CONFIG_FILE
from dit_lora.registry import get_family


def _inputs(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    x = torch.randn(2, cfg.in_channels, 8, 8, generator=g)
    text = torch.randn(2, 12, cfg.caption_channels, generator=g)
    mask = torch.ones(2, 12, dtype=torch.long)
    t = torch.tensor([900.0, 150.0])
    return dict(hidden_states=x, encoder_hidden_states=text, encoder_attention_mask=mask, timestep=t, return_dict=False)


def _trained(tiny_sana, kind: str):
    """The tiny Sana transformer in fp32 with a ``kind`` adapter whose every weight is moved off its start."""
    from diffusers import SanaTransformer2DModel

    model = SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=torch.float32)
    lora = TrainConfig(lora_type=kind, rank=4, lora_alpha=8).lora  # scale 2: the fold is exact
    trainables.add_adapter(model, lora, targets=("to_q", "to_v"), seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def _write(model, family, out):
    lora, backbone = trainables.split_trainable_state(model, [])
    return write_adapter(family, out, lora, model.peft_config["default"].to_dict(), backbone, [])


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_lokr_loha_are_peft_files_that_reload_through_peft_at_the_trained_output(kind, tiny_sana, tmp_path):
    from diffusers import SanaPipeline

    from dit_lora import load_adapter

    family = get_family("sana")
    model = _trained(tiny_sana, kind)
    with torch.no_grad():
        want = model(**_inputs(model))[0]
    save_file({"stale": torch.zeros(1)}, str(tmp_path / ADAPTER_FILE))  # an overwritten LoRA run's file
    written = _write(model, family, tmp_path)
    assert {p.name for p in written} == {PEFT_ADAPTER_FILE, PEFT_CONFIG_FILE}
    assert not (tmp_path / ADAPTER_FILE).exists()  # a loader would have taken the stale one
    config = json.loads((tmp_path / PEFT_CONFIG_FILE).read_text())
    assert config["peft_type"] == kind.upper() and config["alpha"] == config["r"] == 4
    for load in (load_adapter_files, load_adapter):  # dit-lora's loader, and the public dit_lora.load_adapter
        pipe = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.float32)
        load(pipe, tmp_path)
        with torch.no_grad():
            got = pipe.transformer.eval()(**_inputs(model))[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        base = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.float32).transformer(**_inputs(model))[0]
    assert (want - base).abs().max() > 1e-2  # the adapter does something


def test_a_foreign_tensor_in_a_peft_file_is_refused(tiny_sana, tmp_path):
    from diffusers import SanaPipeline

    model = _trained(tiny_sana, "lokr")
    _write(model, get_family("sana"), tmp_path)
    state = load_file(str(tmp_path / PEFT_ADAPTER_FILE))
    state["base_model.model.transformer_blocks.0.attn1.to_k.lokr_w1"] = torch.zeros(2, 2)
    save_file(state, str(tmp_path / PEFT_ADAPTER_FILE))
    with pytest.raises(UserError, match="1 unexpected"):
        load_adapter_files(SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.float32), tmp_path)


def test_dora_is_diffusers_file_that_load_lora_weights_reloads_with_its_magnitudes(tiny_sana, tmp_path):
    from diffusers import SanaPipeline

    family = get_family("sana")
    model = _trained(tiny_sana, "dora")
    with torch.no_grad():
        want = model(**_inputs(model))[0]
    _write(model, family, tmp_path)
    saved = load_file(str(tmp_path / ADAPTER_FILE))
    magnitudes = {k: v for k, v in saved.items() if "lora_magnitude_vector" in k}
    assert magnitudes and not (tmp_path / PEFT_ADAPTER_FILE).exists()
    live = dict(model.named_parameters())
    for key, value in magnitudes.items():  # the fold leaves DoRA's magnitude exactly as trained
        name = key.removeprefix("transformer.").replace("lora_magnitude_vector", "lora_magnitude_vector.default")
        assert torch.equal(value, live[name + ".weight"]), key
    pipe = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.float32)
    pipe.load_lora_weights(tmp_path)  # diffusers' own loader
    layer = pipe.transformer.transformer_blocks[0].attn1.to_q
    assert layer.use_dora[next(iter(layer.use_dora))] and layer.scaling[next(iter(layer.scaling))] == 1.0
    with torch.no_grad():
        got = pipe.transformer.eval()(**_inputs(model))[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _finished_run(folder, family: str, kind: str):
    folder.mkdir()
    (folder / "train_summary.json").write_text(json.dumps({"family": family, "config": {"lora_type": kind}}))
    name = ADAPTER_FILE if kind in ("lora", "dora") else PEFT_ADAPTER_FILE
    save_file({"x": torch.zeros(1)}, str(folder / name))
    return folder


def _comfyui_exporters() -> list[str]:
    """The registry entries' default names whose family exports ``comfyui``."""
    from family_cases import entry_defaults

    from dit_lora.registry import get_spec

    return [name for name in entry_defaults()
            if get_spec(name).exports is not None and "comfyui" in get_spec(name).exports.export_formats()]


@pytest.mark.parametrize("family", _comfyui_exporters())
def test_export_refuses_a_format_whose_consumer_cannot_load_the_type(family, tmp_path):
    """Every family's ComfyUI export converts LoRA, LoKr and LoHa; a DoRA run is refused before any file."""
    from dit_lora.output.export import export_run, run_adapter_type

    folder = _finished_run(tmp_path / "run", family, "dora")
    assert run_adapter_type(folder) == "dora"
    with pytest.raises(UserError) as err:
        export_run(folder, "comfyui")
    text = str(err.value)
    assert "--lora_type dora" in text and "`comfyui` export converts LoRA, LoKr, LoHa adapters only" in text
    assert "nothing was written" in text and "\n" not in text
    assert len(list(folder.iterdir())) == 2


def test_a_family_export_that_declares_no_types_converts_lora_only():
    from dit_lora.output.export import check_type_exported

    check_type_exported("toy", object(), "comfyui", "lora")
    with pytest.raises(UserError, match=r"--lora_type lokr.*converts LoRA adapters only.*train with --lora_type lora"):
        check_type_exported("toy", object(), "comfyui", "lokr")


def test_the_run_type_is_read_from_adapter_config_without_a_summary(tmp_path):
    from dit_lora.output.export import run_adapter_type

    (tmp_path / PEFT_CONFIG_FILE).write_text(json.dumps({"peft_type": "LOHA", "r": 4}))
    assert run_adapter_type(tmp_path) == "loha"
    assert run_adapter_type(tmp_path / "nothing") == "lora"
