"""modeling/adapters.py and the trainables of each --lora_type: PEFT's config per type, seeded starts at the base
model, fp32 masters on a bf16 base (DoRA's magnitude included), the backbone never confused with adapter weights,
LoRA+ groups for DoRA, and `dit-lora plan` counting each type's trainable weights as a real attach makes them."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config.schema import LoraOptions
from dit_lora.modeling import trainables
from dit_lora.modeling.adapters import is_adapter_weight, peft_config

KINDS = ("lora", "dora", "lokr", "loha")


def test_each_type_is_its_peft_config_with_its_own_options():
    from peft import LoHaConfig, LoKrConfig, LoraConfig

    targets = ["to_q"]
    lora = peft_config(LoraOptions(rank=4, lora_alpha=8, lora_dropout=0.1), targets)
    assert type(lora) is LoraConfig and not lora.use_dora and lora.lora_alpha == 8 and lora.lora_dropout == 0.1
    assert peft_config(LoraOptions(lora_type="dora"), targets).use_dora
    lokr = peft_config(LoraOptions(lora_type="lokr", rank=2, lora_alpha=3, lokr_factor=4, lokr_decompose_both=True,
                                   rank_dropout=0.1, module_dropout=0.2, use_effective_conv2d=True), targets)
    assert type(lokr) is LoKrConfig and (lokr.r, lokr.alpha, lokr.decompose_factor, lokr.decompose_both) == (2, 3, 4,
                                                                                                              True)
    assert (lokr.rank_dropout, lokr.module_dropout, lokr.use_effective_conv2d) == (0.1, 0.2, True)
    assert peft_config(LoraOptions(lora_type="lokr"), targets).decompose_factor == -1  # unset: PEFT's square root
    loha = peft_config(LoraOptions(lora_type="loha", rank=4, module_dropout=0.3), targets)
    assert type(loha) is LoHaConfig and loha.alpha == 4 and loha.module_dropout == 0.3  # alpha defaults to rank


def test_adapter_weights_are_told_from_base_weights():
    for name in ("a.to_q.lora_A.default.weight", "a.to_q.lora_magnitude_vector.default.weight", "a.lokr_w1.default",
                 "to_q.hada_w2_b", "lora_B.weight"):
        assert is_adapter_weight(name), name
    for name in ("a.to_q.weight", "a.to_q.base_layer.weight", "flora_gate.weight", "x.hada.weight"):
        assert not is_adapter_weight(name), name


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.to_q = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.proj(self.norm(self.to_q(x)))


def _tiny():
    from diffusers.loaders.peft import PeftAdapterMixin

    class Model(_Tiny, PeftAdapterMixin):  # a diffusers model's add_adapter, as every family's transformer has
        pass

    torch.manual_seed(0)  # the same base weights each time (DoRA's magnitude starts as their norm)
    return Model().to(torch.bfloat16)


@pytest.mark.parametrize("kind", KINDS)
def test_every_type_starts_at_the_base_model_seeded_with_fp32_masters_on_a_bf16_base(kind):
    lora = LoraOptions(lora_type=kind, rank=2, lora_alpha=4)
    model = _tiny()
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    with torch.no_grad():
        base = model(x)
    trainables.add_adapter(model, lora, targets=["to_q", "proj"], seed=0)
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    marker = {"lora": "lora_B", "dora": "lora_magnitude_vector", "lokr": "lokr_", "loha": "hada_"}[kind]
    assert any(marker in n for n in trainable)
    assert all(is_adapter_weight(n) and p.dtype == torch.float32 for n, p in trainable.items())
    assert all(p.dtype == torch.bfloat16 for n, p in model.named_parameters() if not p.requires_grad)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(model(x), base, rtol=0.02, atol=0.02)  # DoRA: its magnitude's bf16 norm
    again = _tiny()
    trainables.add_adapter(again, lora, targets=["to_q", "proj"], seed=0)
    assert all(torch.equal(p.float(), trainable[n]) for n, p in again.named_parameters() if p.requires_grad)
    # --train_backbone never takes an adapter weight
    assert trainables.unfreeze_backbone(model, ["to_q", "norm"]) == ["to_q.base_layer.weight",
                                                                       "to_q.base_layer.bias", "norm.weight",
                                                                       "norm.bias"]


def test_loraplus_groups_dora_as_peft_does():
    model = _tiny()
    trainables.add_adapter(model, LoraOptions(lora_type="dora", rank=2), targets=["to_q"], seed=0)
    groups = trainables.build_param_groups(model, learning_rate=1e-4, backbone_names=[], backbone_learning_rate=1e-5,
                                           weight_decay=0.0, loraplus_lr_ratio=16)
    by_name = {g["name"]: g for g in groups}
    names = {id(p): n for n, p in model.named_parameters()}
    assert [names[id(p)] for p in by_name["lora_A"]["params"]] == ["to_q.lora_A.default.weight"]
    assert by_name["lora_B"]["lr"] == pytest.approx(16e-4)  # lora_B and the (1-d) magnitude, as PEFT's LoRA+
    assert {names[id(p)] for g in groups if g["name"].startswith("lora_B") for p in g["params"]} == {
        "to_q.lora_B.default.weight", "to_q.lora_magnitude_vector.default.weight"}


def _dit_reader():
    """DiT-XL-2-256's published configs, two blocks of 2 heads of 16 (for speed)."""
    from dit_lora.catalogue import by_hub_id

    configs = by_hub_id("facebook/DiT-XL-2-256").configs

    def read(subfolder, filename):
        found = configs.get(f"{subfolder}/{filename}")
        if found is not None and subfolder == "transformer":
            found = {**found, "num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16}
        return found

    return read


@pytest.mark.parametrize("kind", ["lokr", "dora"])
def test_the_plan_counts_each_types_trainable_weights_as_a_real_attach(kind):
    """`dit-lora plan` attaches the adapter to its meta-device model: the count and the optimizer's moments are the
    real attach's (on the same configs, real weights)."""
    from diffusers import DiTTransformer2DModel

    from dit_lora.config import TrainConfig
    from dit_lora.plan.tracing import planner
    from dit_lora.registry import get_spec

    spec, read = get_spec("dit"), _dit_reader()
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path="facebook/DiT-XL-2-256", resolution=64,
                      lora_type=kind, rank=4)
    planned = planner(spec).plan_components(cfg, read).model
    trainables.attach_trainables(planned, spec, cfg)
    counted = sum(p.numel() for p in planned.parameters() if p.requires_grad)
    real = DiTTransformer2DModel.from_config(read("transformer", "config.json"))
    from dit_lora.kit.peft_capable import make_peft_capable

    trainables.attach_trainables(make_peft_capable(real), spec, cfg)
    assert counted == sum(p.numel() for p in real.parameters() if p.requires_grad) > 0
    lora = TrainConfig(family="dit", pretrained_model_name_or_path="facebook/DiT-XL-2-256", resolution=64, rank=4)
    plain = planner(spec).plan_components(lora, read).model
    trainables.attach_trainables(plain, spec, lora)
    assert counted != sum(p.numel() for p in plain.parameters() if p.requires_grad)  # the type is counted, not LoRA


class _Blocks(torch.nn.Module):
    """Two wide linear layers, a narrow one and a 3x3 convolution (inputs 4 x 9 = 36)."""

    def __init__(self):
        super().__init__()
        self.wide = torch.nn.Linear(48, 40)
        self.also = torch.nn.Linear(40, 48)
        self.small = torch.nn.Linear(6, 48)
        self.conv = torch.nn.Conv2d(4, 40, 3)


def _blocks():
    from diffusers.loaders.peft import PeftAdapterMixin

    class Model(_Blocks, PeftAdapterMixin):  # a diffusers model's add_adapter
        pass

    return Model()


@pytest.mark.parametrize("kind", ["lora", "dora", "loha"])
def test_a_rank_no_targeted_layer_can_use_is_refused_before_anything_is_allocated(kind):
    """min(in, out) of the widest targeted layer is the largest useful rank: one more is refused in one paragraph
    naming --rank, that rank and the layer, before PEFT makes a weight."""
    from dit_lora.core.errors import UserError

    model = _blocks()
    with pytest.raises(UserError) as refused:
        trainables.add_adapter(model, LoraOptions(lora_type=kind, rank=100000), targets=["wide", "small"], seed=0)
    text = str(refused.value)
    assert "--rank 100000 is larger than any layer the adapter trains can use: the largest useful rank is 40" in text
    assert "(wide: 48 in, 40 out; 2 layers targeted)" in text and "Use --rank 40 or lower" in text
    assert "\n" not in text and not any(is_adapter_weight(n) for n, _ in model.named_parameters())
    notes: list[str] = []
    trainables.add_adapter(model, LoraOptions(lora_type=kind, rank=40), targets=["wide", "small"], seed=0, notes=notes)
    assert notes == ["note: --rank 40 exceeds min(in_features, out_features) of 1 of the 2 targeted layers (e.g. "
                     "small: 6); their update is already whole, the extra rank adds weights but nothing to learn there"]


def test_a_convolutions_useful_rank_counts_its_kernel_and_lokr_is_not_limited():
    """A conv's update is out x (in x kernel): 36 here; LoKr keeps its factors whole past a size, so a huge rank
    costs it no weights (LyCORIS's full-matrix rank) and is not refused."""
    from dit_lora.core.errors import UserError
    from dit_lora.modeling.adapters import check_rank, layer_sides

    model = _blocks()
    assert layer_sides(model.conv) == (36, 40) and layer_sides(torch.nn.LayerNorm(4)) is None
    with pytest.raises(UserError, match="the largest useful rank is 36"):
        check_rank(LoraOptions(rank=37), {"conv": layer_sides(model.conv)})
    assert check_rank(LoraOptions(rank=36), {"conv": layer_sides(model.conv)}) is None
    trainables.add_adapter(model, LoraOptions(lora_type="lokr", rank=100000), targets=["wide"], seed=0)
    weights = sum(p.numel() for n, p in model.named_parameters() if is_adapter_weight(n))
    assert 0 < weights <= 48 * 40  # whole Kronecker factors: no more than the layer itself
