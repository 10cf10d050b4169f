"""families/ltx2/comfyui.py: a dit-lora LTX-2 adapter in ComfyUI's key format (``diffusion_model.`` + Lightricks'
names) comes back through diffusers' own converter for such files as the same tensors under the same diffusers
names, for every Linear layer of 2.0's and 2.3's transformer; the diffusers file's keys are not ComfyUI's."""

from __future__ import annotations

import re

import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.ltx2.comfyui import EXPORTS, TABLE
from dit_lora.families.ltx2.demo import DEMO

#: LTX-2.3's switches: gated attention (to_gate_logits) and the prompt modulations
V23 = {"gated_attn": True, "cross_attn_mod": True, "audio_gated_attn": True, "audio_cross_attn_mod": True,
       "use_prompt_embeddings": False, "perturbed_attn": True}


def _linear_names(extra: dict) -> list[str]:
    from diffusers import LTX2VideoTransformer3DModel

    model = LTX2VideoTransformer3DModel(**{**DEMO.read().value("transformer"), **extra, "num_layers": 2})
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


@pytest.mark.parametrize("extra", [{}, V23], ids=["2.0", "2.3"])
def test_every_layer_round_trips_through_diffusers_converter(extra):
    from diffusers import LTX2Pipeline

    g = torch.Generator().manual_seed(0)
    state = {}
    for name in _linear_names(extra):
        state[f"transformer.{name}.lora_A.weight"] = torch.randn(4, 8, generator=g)
        state[f"transformer.{name}.lora_B.weight"] = torch.randn(8, 4, generator=g)
    exported = EXPORTS.comfyui_state(dict(state))
    assert all(k.startswith("diffusion_model.") for k in exported) and not any(k.endswith(".alpha") for k in exported)
    assert "diffusion_model.transformer_blocks.1.audio_to_video_attn.to_q.lora_A.weight" in exported
    assert "diffusion_model.patchify_proj.lora_A.weight" in exported  # diffusers' proj_in, Lightricks' name
    back = LTX2Pipeline.lora_state_dict(dict(exported))
    back = back[0] if isinstance(back, tuple) else back
    assert set(back) == set(state)
    for key, value in state.items():
        assert torch.equal(back[key], value), key


def test_the_table_names_each_block_layer_as_diffusers_does():
    for layer in ("attn1.to_q", "audio_attn2.to_out.0", "video_to_audio_attn.to_k", "ff.net.2", "audio_ff.net.0.proj"):
        assert TABLE.rename(f"transformer_blocks.7.{layer}") == f"transformer_blocks.7.{layer}"
    assert TABLE.rename("time_embed.linear") == "adaln_single.linear"
    assert TABLE.rename("audio_time_embed.emb.timestep_embedder.linear_1") == (
        "audio_adaln_single.emb.timestep_embedder.linear_1")
    assert TABLE.rename("audio_prompt_adaln.linear") == "audio_prompt_adaln_single.linear"


def test_an_unknown_module_is_refused_by_name():
    state = {"transformer.not_a_layer.lora_A.weight": torch.zeros(2, 2),
             "transformer.not_a_layer.lora_B.weight": torch.zeros(2, 2)}
    with pytest.raises(UserError, match=re.escape("not_a_layer")):
        EXPORTS.comfyui_state(state)


def test_the_downscale_factor_goes_into_the_adapters_metadata(tmp_path):
    from safetensors.torch import load_file, save_file

    from dit_lora.families.ltx2.comfyui import stamp_factor, stamped_factor

    path = tmp_path / "pytorch_lora_weights.safetensors"
    save_file({"a": torch.ones(2)}, str(path), metadata={"format": "pt"})
    assert stamped_factor(path) is None
    stamp_factor(path, 2)
    assert stamped_factor(path) == 2
    assert torch.equal(load_file(str(path))["a"], torch.ones(2))


def test_dit_lora_export_stamps_the_runs_factor_into_the_comfyui_file(tmp_path):
    """An IC-LoRA run's folder (its adapter stamped with factor 2): `dit-lora export --format comfyui` writes the
    ComfyUI file with the same factor in its metadata, the adapter left as it was."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from dit_lora.families.ltx2.comfyui import ICExports, stamp_factor, stamped_factor

    g = torch.Generator().manual_seed(0)
    name = "transformer.transformer_blocks.0.attn1.to_q"
    state = {f"{name}.lora_A.weight": torch.randn(4, 8, generator=g), f"{name}.lora_B.weight": torch.randn(8, 4, generator=g)}
    adapter = tmp_path / "pytorch_lora_weights.safetensors"
    save_file(state, str(adapter), metadata={"format": "pt"})
    stamp_factor(adapter, 2)
    before = adapter.read_bytes()
    written = ICExports(EXPORTS, adapter.name).export_adapter(tmp_path, "comfyui")
    assert written and all(stamped_factor(p) == 2 for p in written) and adapter.read_bytes() == before
    with safe_open(str(written[0]), framework="pt") as handle:
        assert "diffusion_model.transformer_blocks.0.attn1.to_q.lora_A.weight" in handle.keys()
    assert not list(tmp_path.glob(".*.tmp"))  # the stamp's temporary file renamed into place
