"""families/flux2/model.py: which pipeline a folder is, the size check, the LoRA targets, buckets and precision."""

from __future__ import annotations

import pytest
import torch
from flux2_configs import flux2_cfg
from peft import LoraConfig

from dit_lora.contract.spec import generic_defaults
from dit_lora.core.errors import UserError
from dit_lora.families.flux2.demo import tiny_configs
from dit_lora.kit.loader import folder_pipeline
from dit_lora.families.flux2.model import PIPELINES, check_resolution
from dit_lora.registry import get_family


def test_the_folders_pipeline_decides_dev_or_klein(tmp_path):
    cfg = flux2_cfg(pretrained_model_name_or_path=str(tmp_path))
    assert folder_pipeline(cfg.model, PIPELINES) == "Flux2Pipeline"  # unreadable: dev
    (tmp_path / "model_index.json").write_text('{"_class_name": "Flux2KleinPipeline"}')
    assert folder_pipeline(cfg.model, PIPELINES) == "Flux2KleinPipeline"
    adapter = get_family("flux2").adapter  # the reload's pipeline is the folder's; the saver the family's first
    assert adapter.pipeline_class(cfg.model).__name__ == "Flux2KleinPipeline"
    assert adapter.pipeline_class().__name__ == "Flux2Pipeline" == PIPELINES[0] == get_family("flux2").info.pipeline_class_name


def test_a_size_off_the_latent_stride_is_refused_naming_the_nearest():
    check_resolution(1024)
    with pytest.raises(UserError, match=r"--resolution 1000 is not divisible by 16.*Use 992 or 1008"):
        check_resolution(1000)
    spec, cfg = get_family("flux2"), flux2_cfg()
    assert spec.image_buckets.bucket_stride(cfg.model) == 16 and spec.image_buckets.square_only() is None
    assert spec.precision.expected_dtypes(None, cfg.weight_dtype)["vae"] == torch.float32
    assert spec.defaults is None and generic_defaults(spec, cfg.model, cfg.family_options) == {}  # no trained size in the transformer config


def test_default_lora_targets_are_diffusers_scripts():
    """Double blocks: to_q, to_k, to_v, to_out.0 (the image stream only); single blocks: to_qkv_mlp_proj and
    attn.to_out, as train_dreambooth_lora_flux2.py's default."""
    from diffusers import Flux2Transformer2DModel

    spec = get_family("flux2")
    model = Flux2Transformer2DModel(**tiny_configs("dev")["transformer"])
    targets = spec.model.lora_targets(model, flux2_cfg().lora)
    model.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=targets))
    wrapped = sorted(n.removesuffix(".lora_A") for n, _ in model.named_modules() if n.endswith(".lora_A"))
    doubles = [f"transformer_blocks.{i}.attn.{m}" for i in range(2) for m in ("to_k", "to_out.0", "to_q", "to_v")]
    singles = [f"single_transformer_blocks.{i}.attn.{m}" for i in range(2) for m in ("to_out", "to_qkv_mlp_proj")]
    assert wrapped == sorted(doubles + singles)
    assert spec.model.lora_targets(model, flux2_cfg(lora_layers=("to_add_out",)).lora) == ["to_add_out"]


def test_a_distilled_klein_is_warned_and_its_ignored_guidance_said(tmp_path):
    """A step-distilled klein (model_index.json's is_distilled) is warned as Z-Image-Turbo is; --flux2_train_guidance
    given to a klein run, which has no guidance embedding, is said to do nothing; dev and a base klein say nothing."""
    import json

    from dit_lora.families.flux2.model import Flux2Notes

    notes, index = Flux2Notes(), tmp_path / "model_index.json"
    index.write_text(json.dumps({"_class_name": "Flux2KleinPipeline", "is_distilled": True}))
    (warning,) = notes.start_notes(flux2_cfg(pretrained_model_name_or_path=str(tmp_path)))
    assert "step-distilled FLUX.2 [klein]" in warning and "FLUX.2-klein-base-4B" in warning
    guided = flux2_cfg(pretrained_model_name_or_path=str(tmp_path), flux2_train_guidance=3.5)
    index.write_text(json.dumps({"_class_name": "Flux2KleinPipeline", "is_distilled": False}))
    (said,) = notes.start_notes(guided)
    assert said.startswith("--flux2_train_guidance does nothing here")
    index.write_text(json.dumps({"_class_name": "Flux2Pipeline"}))  # dev: the guidance is trained
    assert notes.start_notes(guided) == []
