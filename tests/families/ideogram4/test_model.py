"""Ideogram 4's model checks: a size the pipeline cannot take, pickle-only unconditional weights and a
``--transformer_file`` (diffusers has no single-file loader for it) refused in one paragraph each; what stays out of
``--quantize_base``."""

from __future__ import annotations

import shutil

import pytest


def test_sizes_and_pickles_are_refused_before_anything_loads(tiny_ideogram4, tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_spec

    model = get_spec("ideogram4").model
    model.validate_config(TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(tiny_ideogram4)))
    with pytest.raises(UserError, match="divisible by 16"):
        model.validate_config(
            TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(tiny_ideogram4), resolution=72)
        )
    pickled = shutil.copytree(tiny_ideogram4, tmp_path / "pickled")
    for file in (pickled / "unconditional_transformer").glob("*.safetensors"):
        file.rename(file.with_suffix(".bin"))
    with pytest.raises(UserError, match=r"stores unconditional_transformer/ weights only as pickle files") as refused:
        model.validate_config(TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(pickled)))
    assert "\n" not in str(refused.value)


def test_a_transformer_file_is_refused_naming_the_folder_to_train_from(tiny_ideogram4, tmp_path):
    import torch
    from safetensors.torch import save_file

    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.modelfiles.single_file import check_transformer_file

    file = tmp_path / "ideogram4.safetensors"
    save_file({"layers.0.attention.to_q.weight": torch.zeros(2, 2)}, str(file))
    cfg = TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(tiny_ideogram4),
                                 transformer_file=str(file))  # fmt: skip
    with pytest.raises(UserError, match="Ideogram4Transformer2DModel, which diffusers cannot load from a single file"):
        check_transformer_file(cfg.model, config_reader(cfg.model))


def test_the_embedders_and_output_stay_out_of_quantization(parts):
    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import quantize_skip_modules
    from dit_lora.registry import get_spec

    skipped = quantize_skip_modules(get_spec("ideogram4"), TrainConfig.for_family("ideogram4"))
    names = {name.split(".")[0] for name, _ in parts["transformer"].named_modules() if name}
    assert set(skipped) <= names  # each one a module of the transformer
    assert {"t_embedding", "adaln_proj", "embed_image_indicator", "final_layer"} <= set(skipped)  # diffusers' script's
    assert "layers" not in skipped and "llm_cond_proj" not in skipped
