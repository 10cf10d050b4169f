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
    assert spec.model.lora_targets(comps.model, cfg.lora) == ["to_q", "to_k", "to_v", "to_out.0"]
    assert spec.trainables.backbone_patterns(cfg.lora, cfg.family_options) == []
    resized = dit_cfg(tiny_dit, tmp_path, tmp_path / "o", num_classes=3)
    assert spec.trainables.backbone_patterns(resized.lora, resized.family_options) == [
        CLASS_EMBEDDING_PATTERN]
    assert spec.precision.expected_dtypes(comps, cfg.weight_dtype) == {"model": cfg.weight_dtype, "vae": torch.float32}
    assert spec.defaults.generic_defaults(cfg.model, cfg.family_options)["resolution"][0] == 64


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
    assert "only square" in family.image_buckets.square_only() and family.image_buckets.bucket_stride(cfg.model) == 16  # VAE 8 x patch 2
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


def _edited_copy(tiny_dit, tmp_path, component: str, file: str, **changes):
    """The tiny DiT folder copied, with ``changes`` written into ``<component>/<file>``."""
    import json
    import shutil

    model = tmp_path / "dit"
    shutil.copytree(tiny_dit, model)
    path = model / component / file
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return model


@pytest.mark.parametrize(
    ("component", "file", "changes", "message"),
    [
        ("transformer", "config.json", {"norm_type": "ada_norm_single"},
         r"is not a class-conditional DiT .*'ada_norm_single'.*facebook/DiT-XL-2-256"),
        ("transformer", "config.json", {"num_embeds_ada_norm": None},
         r"is not a class-conditional DiT .*num_embeds_ada_norm None"),
        ("scheduler", "scheduler_config.json", {"prediction_type": "v_prediction"},
         r"prediction_type 'v_prediction'.*trains epsilon prediction"),
    ],
)
def test_a_folder_dit_cannot_train_is_refused_before_loading(tiny_dit, tmp_path, component, file, changes, message):
    """A transformer without class conditioning, or a scheduler predicting anything but the noise: one paragraph
    naming the folder's value and what DiT trains, from the configs alone."""
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_family

    model = _edited_copy(tiny_dit, tmp_path, component, file, **changes)
    with pytest.raises(UserError, match=message):
        get_family("dit").model.validate_config(dit_cfg(model, tmp_path, tmp_path / "o"))


def test_a_resolution_other_than_the_native_one_is_refused_naming_it(tiny_dit, tmp_path):
    """DiTPipeline samples only at sample_size x the VAE's factor (64 px for the tiny model): another --resolution
    is refused with the native size and where it comes from; the native one passes."""
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_family

    family = get_family("dit")
    with pytest.raises(UserError, match=r"--resolution 128 differs from this DiT's native 64 px \(transformer "
                                        r"sample_size 8 x the VAE's 8x\).*Use --resolution 64"):
        family.model.validate_config(dit_cfg(tiny_dit, tmp_path, tmp_path / "o", resolution=128))
    family.model.validate_config(dit_cfg(tiny_dit, tmp_path, tmp_path / "o"))
