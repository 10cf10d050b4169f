"""LoRA injection, parameter groups and the precision policy (the adapter files: tests/output/test_adapter.py)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.registry import get_family
from dit_lora.modeling import trainables


def _cfg(model, **kw) -> TrainConfig:
    return TrainConfig(pretrained_model_name_or_path=str(model), train_data_dir="unused", resolution=64, **kw)


@pytest.fixture(scope="module")
def loaded(tiny_sana):
    family = get_family("sana")
    cfg = _cfg(tiny_sana)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    family.setup.configure(comps, cfg)
    return family, cfg, comps


def test_precision_policy(loaded):
    family, cfg, comps = loaded
    assert comps.model.dtype == torch.bfloat16
    assert next(comps.encoders["text_encoder"].parameters()).dtype == torch.bfloat16
    assert next(comps.encoders["vae"].parameters()).dtype == torch.float32
    assert not any(p.requires_grad for p in comps.model.parameters())


def _fresh_transformer(tiny_sana):
    from diffusers import SanaTransformer2DModel

    return SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=torch.bfloat16)


def test_lora_weights_are_fp32_masters_on_bf16_base(tiny_sana):
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=8, dropout=0.0, targets=("to_q", "to_out.0"), seed=0)
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and p.dtype == torch.float32 for n, p in trainable.items())
    frozen = [p for n, p in model.named_parameters() if not p.requires_grad]
    assert all(p.dtype == torch.bfloat16 for p in frozen)
    assert any(n.endswith("to_out.0.lora_A.default.weight") for n in trainable)


def test_param_groups_and_learning_rates(tiny_sana):
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_q", "to_k"), seed=0)
    backbone = trainables.unfreeze_backbone(model, ["caption_projection", r"time_embed\."])
    assert backbone and all("caption_projection" in n or "time_embed." in n for n in backbone)
    groups = trainables.build_param_groups(model, learning_rate=1e-4, backbone_names=backbone, backbone_learning_rate=1e-5,
                                         weight_decay=0.01, loraplus_lr_ratio=None)
    info = {g.name: g for g in trainables.describe_groups(groups)}
    assert set(info) == {"lora", "backbone"}
    assert info["lora"].lr == 1e-4 and info["backbone"].lr == 1e-5
    n_lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert info["lora"].num_params == n_lora
    assert info["backbone"].num_params == sum(dict(model.named_parameters())[n].numel() for n in backbone)
    table = trainables.format_groups(list(info.values()))
    assert "backbone" in table and f"{n_lora:,}" in table

    plus = trainables.build_param_groups(model, learning_rate=1e-4, backbone_names=backbone, backbone_learning_rate=1e-5,
                                       weight_decay=0.0, loraplus_lr_ratio=16)
    by_name = {g["name"]: g for g in plus}
    assert by_name["lora_A"]["lr"] == 1e-4 and by_name["lora_B"]["lr"] == pytest.approx(1.6e-3)
    assert all("lora_A" in n for n, p in model.named_parameters() if any(p is q for q in by_name["lora_A"]["params"]))
    assert by_name["backbone"]["lr"] == 1e-5
    ids = [id(p) for g in plus for p in g["params"]]
    assert len(ids) == len(set(ids)) == sum(1 for p in model.parameters() if p.requires_grad)


def test_bad_targets_and_patterns_name_valid_options(tiny_sana):
    from dit_lora.core.errors import UserError

    model = _fresh_transformer(tiny_sana)
    with pytest.raises(UserError, match="to_q"):
        trainables.add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_qq",), seed=0)
    with pytest.raises(UserError, match="--train_backbone"):
        trainables.unfreeze_backbone(model, ["no_such_module"])


def test_fp16_checkpoint_is_flagged(tmp_path):
    from safetensors.torch import save_file

    family = get_family("sana")
    (tmp_path / "transformer").mkdir()
    (tmp_path / "model_index.json").write_text("{}")
    save_file({"w": torch.zeros(2, dtype=torch.float16)}, str(tmp_path / "transformer" / "m.safetensors"))
    notes = family.notes.precision_notes(_cfg(tmp_path))
    assert notes and "fp16" in notes[0] and "_BF16_diffusers" in notes[0]
    save_file({"w": torch.zeros(2, dtype=torch.bfloat16)}, str(tmp_path / "transformer" / "m.safetensors"))
    assert family.notes.precision_notes(_cfg(tmp_path)) == []


@pytest.mark.parametrize("hub_id, advice", [
    ("Efficient-Large-Model/Sana_600M_1024px_diffusers", "has no BF16 release"),
    ("Efficient-Large-Model/Sana_1600M_1024px_diffusers",
     "Prefer its BF16 release, Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"),
])
def test_fp16_advice_names_the_bf16_release_only_where_one_exists(tmp_path, hub_id, advice):
    """Hub layout: fp32 main files beside an fp16 variant; --variant fp16 is what is read."""
    from real_layout import write_configs
    from safetensors.torch import save_file

    folder = write_configs(hub_id, tmp_path / "model")
    save_file({"w": torch.zeros(2)}, str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))
    save_file({"w": torch.zeros(2, dtype=torch.float16)},
              str(folder / "transformer" / "diffusion_pytorch_model.fp16.safetensors"))
    family = get_family("sana")
    assert family.notes.precision_notes(TrainConfig(pretrained_model_name_or_path=str(folder))) == []  # fp32 main files
    (note,) = family.notes.precision_notes(TrainConfig(pretrained_model_name_or_path=str(folder), variant="fp16"))
    assert advice in note
    assert family.notes.precision_notes(TrainConfig(pretrained_model_name_or_path=str(folder), variant="fp16",
                                              mixed_precision="fp16")) == []


def _linear_and_conv():
    from diffusers import ModelMixin
    from diffusers.loaders.peft import PeftAdapterMixin

    class Tiny(ModelMixin, PeftAdapterMixin):  # diffusers' adapter mixin (add_adapter), one Linear and one Conv2d
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.conv = torch.nn.Conv2d(2, 2, 3)

    return Tiny()


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_effective_conv2d_without_a_trained_convolution_is_refused(kind):
    from dit_lora.config.schema import LoraOptions
    from dit_lora.core.errors import UserError

    lora = LoraOptions(lora_type=kind, rank=2, use_effective_conv2d=True)
    with pytest.raises(UserError, match="none of the layers the adapter trains is a Conv2d"):
        trainables.add_adapter(_linear_and_conv(), lora, targets=["lin"], seed=0)
    config = trainables.add_adapter(_linear_and_conv(), lora, targets=["lin", "conv"], seed=0)
    assert config.use_effective_conv2d
