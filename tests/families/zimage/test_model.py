"""families/zimage/model.py: the resolutions Z-Image takes, its precision, the Turbo note, buckets, defaults."""

from __future__ import annotations

import json

import pytest
import torch
from zimage_layout import zimage_cfg

from dit_lora.catalogue import by_hub_id
from dit_lora.core.errors import UserError
from dit_lora.families.zimage.model import check_resolution, is_turbo, latent_stride
from dit_lora.registry import get_family

CONFIGS = by_hub_id("Tongyi-MAI/Z-Image").configs


def test_resolution_must_be_a_multiple_of_the_latent_stride():
    tr, vae = CONFIGS["transformer/config.json"], CONFIGS["vae/config.json"]
    assert latent_stride(tr, vae) == 16
    check_resolution(1024, tr, vae)
    with pytest.raises(UserError, match="--resolution 1000 is not divisible by 16.*Use 992 or 1008"):
        check_resolution(1000, tr, vae)


def _folder(tmp_path, hub_id):
    for file, config in by_hub_id(hub_id).configs.items():
        path = tmp_path / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("hub_id, turbo", [("Tongyi-MAI/Z-Image-Turbo", True), ("Tongyi-MAI/Z-Image", False)])
def test_turbo_is_told_by_its_configs_and_warned(tmp_path, hub_id, turbo):
    spec = get_family("zimage")
    cfg = zimage_cfg(pretrained_model_name_or_path=str(_folder(tmp_path / "m", hub_id)))
    assert is_turbo(cfg) is turbo
    notes = spec.notes.start_notes(cfg)
    assert bool(notes) is turbo
    if turbo:
        assert "step-distilled" in notes[0] and "Tongyi-MAI/Z-Image" in notes[0] and "771" in notes[0]
    assert spec.defaults.generic_defaults(cfg.model, cfg.family_options) == {"resolution": (1024, "the VAE's sample_size")}
    assert spec.image_buckets.bucket_stride(cfg.model) == 16 and spec.image_buckets.square_only() is None


def test_precision_and_quantization_skips():
    spec = get_family("zimage")
    cfg = zimage_cfg()
    assert spec.precision.expected_dtypes(None, cfg.weight_dtype) == {"model": torch.bfloat16, "text_encoder": torch.bfloat16,
                                                         "vae": torch.float32}
    assert "t_embedder" in spec.precision.quantize_skip_modules()
    assert is_turbo(zimage_cfg(pretrained_model_name_or_path="some/z-image-turbo-copy"))
