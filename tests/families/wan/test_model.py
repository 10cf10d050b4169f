"""families/wan/model.py: Wan's checks before any weight loads (each refusal is one paragraph, a UserError without
a line break, naming the flag or file and the fix; each accepted counterpart shows the check is not over-eager);
only the trained expert(s) of an A14B checkpoint are read (``--wan_expert high`` never opens ``transformer_2``);
the dtypes diffusers' Wan docs load them in (VAE fp32; transformer and UMT5 in the run's dtype); the defaults and
the notes. The memory plan's components: test_plan.py."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.families.wan.experts import WanExperts
from dit_lora.families.wan.model import DEFAULTS, WanNotes, trained_experts
from dit_lora.families.wan.spec import TASKS
from dit_lora.registry import get_family

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
    assert trained_experts(family.video_frames, cfg.model, cfg.family_options) == ["high"]
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
    assert dtypes == expected == family.precision.expected_dtypes(comps, cfg.weight_dtype)
    assert comps.encoders["tokenizer"] is not None


def test_mixed_precision_no_loads_fp32(wan_model):
    comps = get_family("wan").model.load_components(_cfg(wan_model("2.1-t2v"), mixed_precision="no"), CPU)
    assert comps.model.dtype == comps.encoders["text_encoder"].dtype == torch.float32


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


@pytest.fixture(autouse=True)
def _one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def _validate(path, family: str, **values) -> None:
    cfg = TrainConfig.for_family(family, pretrained_model_name_or_path=str(path), train_data_dir="clips", **values)
    get_family(family).model.validate_config(cfg)


def _refused(path, family: str, **values) -> str:
    with pytest.raises(UserError) as caught:
        _validate(path, family, **values)
    text = str(caught.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("variant", FAMILY)
def test_each_variant_passes_under_its_family(wan_model, variant):
    _validate(wan_model(variant), FAMILY[variant])


def test_ti2v_passes_under_both_families(wan_model):
    _validate(wan_model("2.2-ti2v"), "wan_i2v")


@pytest.mark.parametrize("variant,family,fix", [
    ("2.1-t2v", "wan_i2v", "--family wan"), ("2.2-t2v-a14b", "wan_i2v", "--family wan"),
    ("2.1-i2v", "wan", "--family wan_i2v"), ("2.2-i2v-a14b", "wan", "--family wan_i2v"),
])
def test_a_checkpoint_of_the_other_task_is_refused(wan_model, variant, family, fix):
    text = _refused(wan_model(variant), family)
    kind = "an image-to-video" if "i2v" in variant else "a text-to-video"
    assert f"is {kind} Wan checkpoint (transformer in_channels" in text
    assert f"--family {family} trains" in text and text.endswith(f"Use {fix}.")


def test_wan_expert_on_a_single_expert_checkpoint_is_refused(wan_model):
    text = _refused(wan_model("2.1-t2v"), "wan", wan_expert="high")
    assert text.startswith("--wan_expert high:") and "one transformer" in text and "Remove --wan_expert" in text
    for expert in ("high", "low", "both"):
        _validate(wan_model("2.2-t2v-a14b"), "wan", wan_expert=expert)


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_lokr_loha_on_a14b_are_refused_and_accepted_on_one_transformer(wan_model, kind):
    """A14B's two experts are placed by diffusers' LoRA loading (the adapter index); LoKr/LoHa are PEFT-format files
    (config/adapter_types.py), one per model."""
    text = _refused(wan_model("2.2-t2v-a14b"), "wan", lora_type=kind, wan_expert="high")
    assert text.startswith(f"--lora_type {kind}:") and "Wan 2.2 A14B" in text and "--lora_type lora or dora" in text
    _validate(wan_model("2.2-t2v-a14b"), "wan", lora_type="dora")
    _validate(wan_model("2.1-t2v"), "wan", lora_type=kind)


def test_ti2v_image_probability_only_for_ti2v(wan_model):
    text = _refused(wan_model("2.1-t2v"), "wan", ti2v_image_probability=0.5)
    assert text.startswith("--ti2v_image_probability applies to Wan 2.2 TI2V-5B") and "Remove it" in text
    assert "text-to-video" in text
    _validate(wan_model("2.2-ti2v"), "wan", ti2v_image_probability=0.5)


def test_max_sequence_length_other_than_512_is_refused(wan_model):
    text = _refused(wan_model("2.1-t2v"), "wan", max_sequence_length=226)
    assert text.startswith("--max_sequence_length 226:") and "512 UMT5 tokens" in text
    assert "Remove --max_sequence_length or set it to 512" in text
    _validate(wan_model("2.1-t2v"), "wan", max_sequence_length=512)


def test_a_size_over_twice_the_largest_trained_tokens_needs_the_flag(wan_model):
    """The reference is the largest size the checkpoint generates at: 81x720x1280 (75,600 tokens) for 2.1/2.2 A14B."""
    path = wan_model("2.1-t2v")
    _validate(path, "wan", height=720, width=2560)  # exactly 2x: accepted
    text = _refused(path, "wan", height=736, width=2560)  # 21 x 46 x 160 latent tokens
    assert text.startswith("81x736x2560 (frames x height x width) is 154,560 latent tokens per clip, over 2x the "
                           "75,600 of 81x720x1280")
    assert "--allow_untrained_resolution" in text and "--max_num_frames/--height/--width" in text
    text = _refused(path, "wan", max_num_frames=177, height=720, width=1280)  # 45 latent frames
    assert text.startswith("177x720x1280 (frames x height x width) is 162,000 latent tokens")
    _validate(path, "wan", height=736, width=2560, allow_untrained_resolution=True)


def test_ti2v_size_limit_is_its_own_trained_size(wan_model):
    path = wan_model("2.2-ti2v")
    _validate(path, "wan", height=1408, width=1280)  # 31 x 44 x 40 latent tokens: exactly 2x 121x704x1280
    text = _refused(path, "wan", height=1440, width=1280)  # 31 x 45 x 40
    assert text.startswith("121x1440x1280 (frames x height x width) is 55,800 latent tokens per clip, over 2x the "
                           "27,280 of 121x704x1280 (Wan2.2 TI2V-5B")


@pytest.mark.parametrize("variant,flag,value,multiple", [
    ("2.1-t2v", "height", 488, 16), ("2.1-t2v", "width", 840, 16),
    ("2.2-ti2v", "height", 688, 32), ("2.2-ti2v", "width", 1264, 32),
])
def test_sizes_must_be_multiples_of_the_vae_and_patch(wan_model, variant, flag, value, multiple):
    text = _refused(wan_model(variant), FAMILY[variant], **{flag: value})
    assert text.startswith(f"--{flag} {value} must be a multiple of {multiple} for this Wan checkpoint")
    fixed = int(text.rsplit("use ", 1)[1].rstrip("."))
    assert fixed % multiple == 0 and abs(fixed - value) <= multiple // 2
    _validate(wan_model(variant), FAMILY[variant], **{flag: fixed})


def _with_pipeline_class(wan_model, tmp_path, name: str):
    folder = tmp_path / name
    shutil.copytree(wan_model("2.1-t2v"), folder)
    index = folder / "model_index.json"
    index.write_text(json.dumps({**json.loads(index.read_text()), "_class_name": name}))
    return folder


@pytest.mark.parametrize("name,hint", [
    ("WanVACEPipeline", "a Wan variant this recipe does not train (VACE, Animate and video-to-video are not "
                        "supported)"),
    ("WanVideoToVideoPipeline", "a Wan variant this recipe does not train"),
    ("CogVideoXPipeline", "use the --family of that model"),
])
def test_another_pipeline_class_is_refused(wan_model, tmp_path, name, hint):
    text = _refused(_with_pipeline_class(wan_model, tmp_path, name), "wan")
    assert f"its model_index.json names {name} ({hint}" in text
    assert "WanPipeline, WanImageToVideoPipeline" in text and "Wan-AI/Wan2.1-T2V-1.3B-Diffusers" in text


def test_two_experts_without_a_boundary_ratio_are_refused(wan_model, tmp_path):
    """model_index.json naming transformer_2 but no boundary_ratio: refused in one paragraph before loading, and by
    the loader itself (it used to fail with a TypeError on None, and the start notes on formatting it)."""
    folder = tmp_path / "a14b"
    shutil.copytree(wan_model("2.2-t2v-a14b"), folder)
    index = folder / "model_index.json"
    index.write_text(json.dumps({k: v for k, v in json.loads(index.read_text()).items() if k != "boundary_ratio"}))
    for values in ({}, {"wan_expert": "high"}):
        text = _refused(folder, "wan", **values)
        assert text.startswith(f"`{folder}`: model_index.json names two transformers (transformer and transformer_2)")
        assert "but no boundary_ratio" in text and "or remove transformer_2 from it" in text
    cfg = TrainConfig.for_family("wan", pretrained_model_name_or_path=str(folder), train_data_dir="clips")
    with pytest.raises(UserError, match="but no boundary_ratio"):
        get_family("wan").model.load_components(cfg, torch.device("cpu"))


def test_both_experts_on_several_processes_is_refused(wan_model, monkeypatch):
    path = wan_model("2.2-t2v-a14b")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for values in ({}, {"wan_expert": "both"}):  # both is the default for two experts
        text = _refused(path, "wan", **values)
        assert text.startswith("--wan_expert both alternates the experts") and "--wan_expert high" in text
    _validate(path, "wan", wan_expert="low")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # an FSDP2 launch says why in its own words
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert "under FSDP2 the idle expert's frozen weights" in _refused(path, "wan", wan_expert="both")
    _validate(path, "wan", wan_expert="high")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    _validate(path, "wan", wan_expert="both")


def test_a_missing_validation_image_is_refused_for_wan_i2v(wan_model, tmp_path):
    missing = tmp_path / "first.png"
    text = _refused(wan_model("2.1-i2v"), "wan_i2v", validation_image=str(missing))
    assert text.startswith(f"--validation_image `{missing}` does not exist")
    missing.write_bytes(b"")  # existence is what is checked before loading; decoding comes with the samples
    _validate(wan_model("2.1-i2v"), "wan_i2v", validation_image=str(missing))


def test_a_missing_folder_is_named(tmp_path):
    text = _refused(tmp_path / "nowhere", "wan")
    assert "does not exist" in text and "Wan-AI/Wan2.1-T2V-1.3B-Diffusers" in text


def test_defaults_and_notes_are_their_own_components():
    assert DEFAULTS.generic_defaults(None, None)["train_batch_size"][0] == 1
    assert WanNotes(TASKS["wan"]).task is TASKS["wan"]
