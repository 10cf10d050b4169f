"""families/dit/model.py: the config checks, the native resolution, squares only, the class tables trained
besides LoRA, the components and their DiTRun."""

from __future__ import annotations

import pytest
import torch
from dit_configs import dit_cfg
from helpers import base_args, run_recipe


def test_loaded_components_record_what_the_checkpoint_says(tiny_dit, tmp_path):
    from dit_lora.families.dit.embedding import (
        CLASS_EMBEDDING_PATTERN,
        label_embeddings,
    )
    from dit_lora.families.dit.state import DiTRun
    from dit_lora.registry import get_family

    spec = get_family("dit")
    cfg = dit_cfg(tiny_dit, tmp_path, tmp_path / "o")
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    state = comps.state
    assert isinstance(state, DiTRun) and state.base_num_classes == state.null_class == 1000
    assert state.class_dropout_prob == pytest.approx(0.1) and state.in_channels == 4
    assert state.learned_sigma == (comps.model.config.out_channels == 8)
    assert all(emb.dropout_prob == 0.0 for _, emb in label_embeddings(comps.model))  # dropped in the loss instead
    assert spec.model.lora_targets(comps.model, cfg) == ["to_q", "to_k", "to_v", "to_out.0"]
    assert spec.trainables.backbone_patterns(cfg) == []
    assert spec.trainables.backbone_patterns(dit_cfg(tiny_dit, tmp_path, tmp_path / "o", num_classes=3)) == [
        CLASS_EMBEDDING_PATTERN]
    assert spec.precision.expected_dtypes(comps, cfg) == {"model": cfg.weight_dtype, "vae": torch.float32}
    assert spec.defaults.generic_defaults(cfg)["resolution"][0] == 64


@pytest.mark.slow
def test_class_count_mismatch_stops_with_both_numbers(tiny_dit, shape_classes, tmp_path):
    proc = run_recipe(base_args(tiny_dit, shape_classes, tmp_path / "out", tmp_path / "cache"),
                      recipe="dit_class", timeout=300, warm=True)
    text = " ".join((proc.stdout + proc.stderr).split())  # the message is wrapped to the terminal width
    assert proc.returncode == 2, text
    assert "Traceback" not in text
    assert "The dataset has 3 classes" in text and "1000 classes" in text and "--num_classes 3" in text, text


def test_dit_keeps_square_images_because_its_transformer_unpatchifies_a_square():
    """diffusers' DiTTransformer2DModel takes height = width = sqrt(tokens) when unpatchifying: a non-square latent
    cannot come out in its shape, so the family keeps the --resolution square (square_only says why)."""
    from diffusers import DiTTransformer2DModel

    from dit_lora.config import TrainConfig
    from dit_lora.families.dit.demo import get_tiny_dit_config
    from dit_lora.registry import get_family

    family = get_family("dit")
    cfg = TrainConfig.for_family("dit")
    assert "only square" in family.image_buckets.square_only(cfg) and family.image_buckets.bucket_stride(cfg) == 16  # VAE 8 x patch 2
    torch.manual_seed(0)
    model = DiTTransformer2DModel(**get_tiny_dit_config()["transformer"]).eval()
    labels, t = torch.tensor([1]), torch.tensor([500])
    with torch.no_grad():
        square = model(torch.randn(1, 4, 8, 8), timestep=t, class_labels=labels).sample
        assert square.shape == (1, 8, 8, 8)
        # 2 x 8 patches come out as 4 x 4: the wrong shape, its pixels scrambled
        assert model(torch.randn(1, 4, 4, 16), timestep=t, class_labels=labels).sample.shape == (1, 8, 8, 8)
        with pytest.raises(RuntimeError):
            model(torch.randn(1, 4, 4, 24), timestep=t, class_labels=labels)  # 2 x 12 patches: no square root
