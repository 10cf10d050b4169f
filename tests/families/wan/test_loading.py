"""families/wan/loading.py: only the trained expert(s) of an A14B checkpoint are read (``--wan_expert high`` never
opens ``transformer_2``), the dtypes diffusers' Wan docs load them in (VAE fp32; transformer and UMT5 in the run's
dtype), and the memory plan's components build on the meta device for every wan_model variant."""

from __future__ import annotations

import pytest
import torch

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config import TrainConfig
from dit_lora.registry import get_family
from dit_lora.families.wan.demo import WAN_DEMO_VARIANTS
from dit_lora.families.wan.experts import WanExperts
from dit_lora.families.wan.loading import trained_experts

FAMILY = {"2.1-t2v": "wan", "2.1-i2v": "wan_i2v", "2.2-ti2v": "wan", "2.2-t2v-a14b": "wan", "2.2-i2v-a14b": "wan_i2v"}
CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("wan_offline")  # the shared fixtures: conftest.py


@pytest.fixture
def subfolders(monkeypatch):
    """The subfolders ``WanTransformer3DModel.from_pretrained`` is asked for, in order (the real load still runs)."""
    from diffusers import WanTransformer3DModel

    asked: list[str] = []
    original = WanTransformer3DModel.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        asked.append(kwargs.get("subfolder"))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(WanTransformer3DModel, "from_pretrained", classmethod(spy))
    return asked


def _cfg(path, family="wan", **values) -> TrainConfig:
    return TrainConfig.for_family(family, pretrained_model_name_or_path=str(path), train_data_dir="clips", **values)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k].float(), sb[k].float()) for k in sa)


def _direct(path, subfolder, dtype=torch.bfloat16):
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel.from_pretrained(path, subfolder=subfolder, torch_dtype=dtype)


@pytest.mark.parametrize("expert,subfolder", [("high", "transformer"), ("low", "transformer_2")])
def test_one_expert_loads_only_its_transformer(wan_model, subfolders, expert, subfolder):
    path = wan_model("2.2-t2v-a14b")
    family = get_family("wan")
    comps = family.model.load_components(_cfg(path, wan_expert=expert), CPU)
    assert subfolders == [subfolder]
    assert not isinstance(comps.model, WanExperts)
    assert comps.state.expert == expert and comps.state.trained_experts == [expert]
    assert _same_weights(comps.model, _direct(path, subfolder))  # the right expert's weights, not the other's
    assert not _same_weights(comps.model, _direct(path, "transformer_2" if expert == "high" else "transformer"))
    first, end = comps.state.index_ranges[expert]
    timesteps = comps.state.flow_tables[1][first:end]
    owns_high = timesteps >= 0.875 * 1000  # the pipelines route t >= boundary_ratio * 1000 to `transformer`
    assert bool(owns_high.all()) if expert == "high" else not bool(owns_high.any())


def test_both_experts_build_wan_experts(wan_model, subfolders):
    path = wan_model("2.2-t2v-a14b")
    comps = get_family("wan").model.load_components(_cfg(path), CPU)  # --wan_expert defaults to both
    assert subfolders == ["transformer", "transformer_2"]
    model = comps.model
    assert isinstance(model, WanExperts) and model.offload is True
    assert _same_weights(model.high, _direct(path, "transformer"))
    assert _same_weights(model.low, _direct(path, "transformer_2"))
    assert comps.state.trained_experts == ["high", "low"] and comps.state.boundary_ratio == 0.875
    assert hasattr(model, "add_adapter")  # LoRA attaches through diffusers' PeftAdapterMixin
    assert not any(p.requires_grad for p in model.parameters())


def test_single_expert_checkpoints_load_transformer(wan_model, subfolders):
    family = get_family("wan")
    cfg = _cfg(wan_model("2.1-t2v"))
    assert trained_experts(family.video_frames, cfg) == ["high"]
    comps = family.model.load_components(cfg, CPU)
    assert subfolders == ["transformer"] and comps.state.expert is None


@pytest.mark.parametrize("variant", ["2.1-t2v", "2.1-i2v", "2.2-ti2v"])
def test_default_dtypes(wan_model, variant):
    """VAE (and 2.1 I2V's CLIP) in fp32, transformer and UMT5 in bf16 (the default --mixed_precision), even though
    the wan_model folders store everything in fp32; the family's expected dtypes say the same."""
    family = get_family(FAMILY[variant])
    cfg = _cfg(wan_model(variant), FAMILY[variant])
    assert cfg.weight_dtype == torch.bfloat16
    comps = family.model.load_components(cfg, CPU)
    dtypes = {"model": comps.model.dtype, "vae": comps.encoders["vae"].dtype,
              "text_encoder": comps.encoders["text_encoder"].dtype}
    if "image_encoder" in comps.encoders:
        dtypes["image_encoder"] = comps.encoders["image_encoder"].dtype
    expected = {"model": torch.bfloat16, "vae": torch.float32, "text_encoder": torch.bfloat16}
    if variant == "2.1-i2v":
        expected["image_encoder"] = torch.float32
        assert "image_processor" in comps.encoders
    assert dtypes == expected == family.precision.expected_dtypes(comps, cfg)
    assert comps.encoders["tokenizer"] is not None


def test_mixed_precision_no_loads_fp32(wan_model):
    comps = get_family("wan").model.load_components(_cfg(wan_model("2.1-t2v"), mixed_precision="no"), CPU)
    assert comps.model.dtype == comps.encoders["text_encoder"].dtype == torch.float32


@pytest.mark.parametrize("variant", WAN_DEMO_VARIANTS)
def test_plan_components_build_on_meta(wan_model, variant):
    family = get_family(FAMILY[variant])
    cfg = _cfg(wan_model(variant), FAMILY[variant])
    comps = family.plan.plan_components(cfg, config_reader(cfg.model), 2)
    params = list(comps.model.parameters()) + list(comps.encoders["vae"].parameters())
    assert params and all(p.is_meta for p in params)
    assert len(comps.model.blocks) == 2  # the requested depth, not the config's
    assert comps.model.dtype == torch.bfloat16 and comps.encoders["vae"].dtype == torch.float32
    # --wan_expert both with offload (the default): only one expert is on the device at a time
    assert not isinstance(comps.model, WanExperts)
    if variant == "2.1-i2v":
        clip = config_reader(cfg.model)("image_encoder", "config.json")  # CLIP: one token per patch plus the class token
        assert comps.state.clip_tokens == (clip["image_size"] // clip["patch_size"]) ** 2 + 1
    batches = family.plan.plan_batches(cfg, comps)
    assert batches and all(b["latents"].shape[1] == comps.model.config.out_channels for _, b in batches)


def test_plan_without_offload_holds_both_experts(wan_model):
    family = get_family("wan")
    cfg = _cfg(wan_model("2.2-t2v-a14b"), offload_inactive_expert=False)
    comps = family.plan.plan_components(cfg, config_reader(cfg.model), 1)
    assert isinstance(comps.model, WanExperts) and comps.model.high.device.type == "meta"
    high = _cfg(wan_model("2.2-t2v-a14b"), wan_expert="high", offload_inactive_expert=False)
    assert not isinstance(family.plan.plan_components(high, config_reader(high.model), 1).model, WanExperts)


@pytest.mark.parametrize("offload", [True, False])
def test_both_experts_on_an_accelerator_load_only_high_there_with_offload(wan_model, offload):
    """The meta device stands in for the accelerator: with --offload_inactive_expert, low's weights stay in CPU
    memory from the load on (the memory plan counts one expert); without it both go to the device."""
    path = wan_model("2.2-t2v-a14b")
    comps = get_family("wan").model.load_components(_cfg(path, offload_inactive_expert=offload), torch.device("meta"))
    model = comps.model
    assert model.residency() == ({"high": "meta", "low": "cpu"} if offload else {"high": "meta", "low": "meta"})
    if offload:
        assert _same_weights(model.low, _direct(path, "transformer_2"))  # the loaded values, kept on the CPU
        assert set(model._host) == {"high", "low"}
    assert comps.encoders["vae"].device.type == "meta"
