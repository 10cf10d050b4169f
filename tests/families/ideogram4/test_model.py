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

    skipped = quantize_skip_modules(get_spec("ideogram4"))
    names = {name.split(".")[0] for name, _ in parts["transformer"].named_modules() if name}
    assert set(skipped) <= names  # each one a module of the transformer
    assert {"t_embedding", "adaln_proj", "embed_image_indicator", "final_layer"} <= set(skipped)  # diffusers' script's
    assert "layers" not in skipped and "llm_cond_proj" not in skipped


def test_samples_without_the_unconditional_transformer_are_refused_before_anything_loads(tiny_ideogram4, tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_spec

    model = get_spec("ideogram4").model
    half = shutil.copytree(tiny_ideogram4, tmp_path / "half")
    shutil.rmtree(half / "unconditional_transformer")
    model.validate_config(TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(half)))  # trains
    cfg = TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(half), validation_prompt="a circle")
    with pytest.raises(UserError, match=r"no readable unconditional_transformer/config.json.*drop --validation_prompt"):
        model.validate_config(cfg)


def test_the_unconditional_transformer_is_read_frozen_into_host_memory(tiny_ideogram4):
    import torch

    from dit_lora.config import TrainConfig
    from dit_lora.families.ideogram4.model import load_unconditional

    cfg = TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(tiny_ideogram4),
                                 mixed_precision="bf16", validation_prompt="a circle")  # fmt: skip
    module = load_unconditional(cfg)
    params = list(module.parameters())
    assert not module.training and not any(p.requires_grad for p in params)
    assert {p.device.type for p in params} == {"cpu"} and params[0].dtype == torch.bfloat16
