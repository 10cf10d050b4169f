"""families/wan/task.py: the two tasks, what they read from the checkpoint (experts, TI2V image mode, buckets), the
start notes and the defaults."""

from __future__ import annotations

from types import SimpleNamespace

from dit_lora.families.wan import task as task_module
from dit_lora.families.wan.spec import TASKS
from dit_lora.families.wan.task import WanDefaults, WanNotes


def _with_info(monkeypatch, **info):
    monkeypatch.setattr(task_module, "cached_wan_info", lambda cfg: SimpleNamespace(**info))


def _cfg(**opts):
    return SimpleNamespace(family_options=SimpleNamespace(**{"wan_expert": None, "ti2v_image_probability": None,
                                                              **opts}))


def test_the_expert_is_both_by_default_on_a14b_and_none_on_one_transformer(monkeypatch):
    _with_info(monkeypatch, two_experts=True)
    assert TASKS["wan"].expert(_cfg()) == "both" and TASKS["wan"].expert(_cfg(wan_expert="low")) == "low"
    _with_info(monkeypatch, two_experts=False)
    assert TASKS["wan"].expert(_cfg(wan_expert="low")) is None


def test_ti2v_image_mode_defaults_by_task(monkeypatch):
    _with_info(monkeypatch, kind="ti2v")
    assert TASKS["wan"].image_probability(_cfg()) == 0.0 and TASKS["wan_i2v"].image_probability(_cfg()) == 1.0
    assert TASKS["wan"].image_probability(_cfg(ti2v_image_probability=0.25)) == 0.25
    _with_info(monkeypatch, kind="t2v")
    assert TASKS["wan"].image_probability(_cfg(ti2v_image_probability=0.25)) == 0.0


def test_the_pipeline_class_and_frame_rate(monkeypatch):
    _with_info(monkeypatch, fps=16)
    assert TASKS["wan_i2v"].pipeline_class().__name__ == "WanImageToVideoPipeline"
    assert TASKS["wan"].model_fps(_cfg()) == 16


def test_defaults_and_notes_are_their_own_components():
    assert WanDefaults().generic_defaults(None)["train_batch_size"][0] == 1
    assert WanNotes(TASKS["wan"]).task is TASKS["wan"]


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
