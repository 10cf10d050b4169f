"""families/wan/info.py: what a Wan checkpoint's small config files say, read from each wan_model demo variant and from
the catalogue's copies of the published configs (a catalogued Hub id is read offline, without a download).

Expected values: the published ``model_index.json`` (``boundary_ratio`` 0.875 for T2V-A14B and 0.9 for I2V-A14B,
``expand_timesteps`` for TI2V-5B; diffusers ``scripts/convert_wan_to_diffusers.py``), the VAE configs (z_dim 16,
8x spatial; the Wan 2.2 VAE z_dim 48, 16x), Wan's READMEs / ``wan/configs`` (16 fps and 81 frames at 480x832;
TI2V-5B 24 fps, 121 frames at 704x1280) and Wan's ``generate.py`` sequence length: 32760 tokens for 81x480x832
(21 latent frames x 30 x 52 patches).

The task (:class:`WanTask`): the two tasks, what they read from the checkpoint (experts, TI2V image mode, buckets),
the pipeline class and the frame rate.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config import TrainConfig
from dit_lora.families.wan import info as info_module
from dit_lora.families.wan.catalogue import ENTRIES
from dit_lora.families.wan.demo import WAN_DEMO_VARIANTS
from dit_lora.families.wan.info import WanInfo, wan_info
from dit_lora.families.wan.spec import TASKS

#: (kind, two_experts, boundary_ratio, expand_timesteps, z_dim, vae_spatial, fps, image_encoder, pipeline class)
T2V21 = ("t2v", False, None, False, 16, 8, 16, False, "WanPipeline")
I2V21 = ("i2v", False, None, False, 16, 8, 16, True, "WanImageToVideoPipeline")
TI2V = ("ti2v", False, None, True, 48, 16, 24, False, "WanPipeline")
T2V_A14B = ("t2v", True, 0.875, False, 16, 8, 16, False, "WanPipeline")
I2V_A14B = ("i2v", True, 0.9, False, 16, 8, 16, False, "WanImageToVideoPipeline")
BY_VARIANT = {"2.1-t2v": T2V21, "2.1-i2v": I2V21, "2.2-ti2v": TI2V, "2.2-t2v-a14b": T2V_A14B,
              "2.2-i2v-a14b": I2V_A14B}
BY_HUB_ID = {
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": T2V21, "Wan-AI/Wan2.1-T2V-14B-Diffusers": T2V21,
    "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers": I2V21, "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers": I2V21,
    "Wan-AI/Wan2.2-TI2V-5B-Diffusers": TI2V, "Wan-AI/Wan2.2-T2V-A14B-Diffusers": T2V_A14B,
    "Wan-AI/Wan2.2-I2V-A14B-Diffusers": I2V_A14B,
}
LAYERS = {"Wan-AI/Wan2.1-T2V-1.3B-Diffusers": 30, "Wan-AI/Wan2.2-TI2V-5B-Diffusers": 30}  # the others: 40


pytestmark = pytest.mark.usefixtures("wan_offline")  # the shared fixtures: conftest.py


def _cfg(path, family="wan") -> TrainConfig:
    return TrainConfig.for_family(family, pretrained_model_name_or_path=str(path))


def _check(info: WanInfo, expected: tuple) -> None:
    kind, two, boundary, expand, z_dim, spatial, fps, image_encoder, pipeline = expected
    assert (info.kind, info.two_experts, info.boundary_ratio, info.expand_timesteps) == (kind, two, boundary, expand)
    assert (info.z_dim, info.vae_spatial, info.vae_temporal, info.patch) == (z_dim, spatial, 4, (1, 2, 2))
    assert (info.fps, info.image_encoder, info.pipeline_class) == (fps, image_encoder, pipeline)
    assert info.in_channels == (2 * z_dim + 4 if kind == "i2v" else z_dim)
    assert info.size_multiple == 2 * spatial  # VAE downsampling x patch 2
    assert info.version == ("2.2" if two or expand else "2.1")
    frames, height, width, why = info.trained_size()
    if expand:
        assert (frames, height, width) == (121, 704, 1280) and "TI2V-5B" in why
        assert info.latent_tokens(frames, height, width) == 31 * 22 * 40  # 27280: Wan2.2 TI2V-5B's seq_len
    else:
        assert (frames, height, width) == (81, 480, 832)
        assert info.latent_tokens(frames, height, width) == 32760  # Wan 2.1's 480p seq_len
    described = info.describe()
    assert described.startswith(f"Wan {info.version} ") and f"{z_dim} channels" in described
    assert ("boundary_ratio" in described) == two and ("CLIP" in described) == image_encoder


@pytest.mark.parametrize("variant", WAN_DEMO_VARIANTS)
def test_each_tiny_variant_reads_as_its_checkpoint(wan_model, variant):
    info = wan_info(_cfg(wan_model(variant), "wan_i2v" if "i2v" in variant else "wan").model)
    _check(info, BY_VARIANT[variant])
    assert info.layers == 1 and info.flow_shift == (5.0 if variant == "2.2-ti2v" else 3.0)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.hub_id)
def test_each_catalogued_hub_id_reads_offline_from_the_catalogue(entry):
    cfg = _cfg(entry.hub_id, entry.family)
    assert config_reader(cfg.model)("", "model_index.json") == entry.configs["model_index.json"]  # the published copy
    info = wan_info(cfg.model)
    _check(info, BY_HUB_ID[entry.hub_id])
    assert info.layers == LAYERS.get(entry.hub_id, 40)
    assert info.flow_shift == (5.0 if "TI2V" in entry.hub_id else 3.0)
    assert {"wan": ("t2v", "ti2v"), "wan_i2v": ("i2v",)}[entry.family].count(info.kind) == 1


def test_latent_tokens_count_the_causal_first_frame_and_patches():
    info = WanInfo()
    assert info.latent_tokens(1, 64, 64) == 1 * 4 * 4  # one frame: one latent frame
    assert info.latent_tokens(9, 64, 64) == 3 * 4 * 4  # (9 - 1) / 4 + 1 latent frames
    assert info.latent_tokens(81, 720, 1280) == 21 * 45 * 80  # Wan 2.1 720p: 75600
    ti2v = WanInfo(vae_spatial=16, z_dim=48, in_channels=48, expand_timesteps=True)
    assert ti2v.size_multiple == 32 and ti2v.latent_tokens(9, 64, 64) == 3 * 2 * 2


def test_unreadable_configs_give_the_defaults_and_no_kind(tmp_path):
    info = wan_info(_cfg(tmp_path / "missing").model)
    assert info.kind is None and info.pipeline_class is None and info.evidence == ""
    assert info == WanInfo()


def _edited(wan_model, tmp_path, variant, **index):
    folder = tmp_path / variant
    shutil.copytree(wan_model(variant), folder)
    path = folder / "model_index.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **index}))
    return folder


def test_experts_need_both_transformers_named_in_model_index(wan_model, tmp_path):
    """TI2V-5B's published model_index.json has ``transformer_2: [null, null]``: one expert, not two."""
    folder = _edited(wan_model, tmp_path, "2.2-t2v-a14b", transformer_2=[None, None], boundary_ratio=None)
    info = wan_info(_cfg(folder).model)
    assert not info.two_experts and info.boundary_ratio is None and info.version == "2.1"


def test_an_unknown_channel_count_is_no_kind(wan_model, tmp_path):
    folder = tmp_path / "fun"
    shutil.copytree(wan_model("2.1-t2v"), folder)
    config = folder / "transformer" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "in_channels": 48}))  # e.g. a control model
    info = wan_info(_cfg(folder).model)
    assert info.kind is None and "in_channels 48, VAE z_dim 16" in info.evidence


def _with_info(monkeypatch, **info):
    monkeypatch.setattr(info_module.WanTask, "infos", lambda model: SimpleNamespace(**info))


def _options(**opts):
    """The family options ``expert`` and ``image_probability`` read (the model's facts stand in: ``_with_info``)."""
    return SimpleNamespace(**{"wan_expert": None, "ti2v_image_probability": None, **opts})


def test_the_expert_is_both_by_default_on_a14b_and_none_on_one_transformer(monkeypatch):
    _with_info(monkeypatch, two_experts=True)
    assert TASKS["wan"].expert(None, _options()) == "both" and TASKS["wan"].expert(None, _options(wan_expert="low")) == "low"
    _with_info(monkeypatch, two_experts=False)
    assert TASKS["wan"].expert(None, _options(wan_expert="low")) is None


def test_ti2v_image_mode_defaults_by_task(monkeypatch):
    _with_info(monkeypatch, kind="ti2v")
    assert TASKS["wan"].image_probability(None, _options()) == 0.0 and TASKS["wan_i2v"].image_probability(None, _options()) == 1.0
    assert TASKS["wan"].image_probability(None, _options(ti2v_image_probability=0.25)) == 0.25
    _with_info(monkeypatch, kind="t2v")
    assert TASKS["wan"].image_probability(None, _options(ti2v_image_probability=0.25)) == 0.0


def test_the_pipeline_class_and_frame_rate(monkeypatch):
    _with_info(monkeypatch, fps=16)
    assert TASKS["wan_i2v"].pipeline_class().__name__ == "WanImageToVideoPipeline"
    assert TASKS["wan"].model_fps(None) == 16


def test_clips_of_other_shapes_get_automatic_buckets_and_the_plan_traces_the_default(tmp_path, monkeypatch):
    """Wan 1.3B's default 81x480x832 comes first, then aspect buckets of at most its area (RoPE is computed per
    size); the memory plan traces the most-token bucket, the default; --frame_buckets pins exactly what it lists."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    from dit_lora.config import TrainConfig
    from dit_lora.data.frames import choose_bucket
    from dit_lora.registry import get_family

    family = get_family("wan")
    cfg = TrainConfig(family="wan", pretrained_model_name_or_path="Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    buckets = family.video_frames.video_buckets(cfg)
    assert buckets[0] == (81, 480, 832) and len(buckets) > 10
    assert all(h * w <= 480 * 832 and h % 16 == 0 == w % 16 for _, h, w in buckets)
    assert choose_bucket(81, 1280, 720, buckets) == (81, 832, 480)
    assert family.plan.pixel_batches(cfg) == [("81 x 480 x 832", (cfg.training.train_batch_size, 81, 3, 480, 832))]
    assert "--frame_buckets 81x480x832 pins this one size" in family.notes.start_notes(cfg)[0]
    pinned = TrainConfig(family="wan", pretrained_model_name_or_path="Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
                         frame_buckets="81x480x832")
    assert family.video_frames.video_buckets(pinned) == [(81, 480, 832)]
