"""training/resume_options.py: what a checkpoint records of its options and data, what a resume may change."""

from __future__ import annotations

import json

import pytest

from dit_lora.config.schema import TrainConfig
from dit_lora.data.sources import RawSample
from dit_lora.core.errors import UserError
from dit_lora.output.report import changed_options_note
from dit_lora.training import resume_options as ro
from dit_lora.training.checkpoint import COMPLETE_MARKER


def _samples(tmp_path, captions=("a", "b")):
    out = []
    for i, caption in enumerate(captions):
        path = tmp_path / f"{i}.png"
        path.write_bytes(b"x" * (10 + i))
        out.append(RawSample(key=path.name, caption=caption, path=str(path), index=i))
    return out


def _checkpoint(tmp_path, cfg, samples, step=4, history=()):
    folder = tmp_path / f"checkpoint-{step}"
    folder.mkdir()
    (folder / COMPLETE_MARKER).write_text(json.dumps({"step": step}))
    ro.write_options(folder, ro.options_record(cfg, samples, list(history)))
    return folder


def _cfg(**values):
    return TrainConfig.for_family("sana", **{"rank": 4, "lora_alpha": 4, "learning_rate": 1e-4, **values})


def test_fixed_changes_are_refused_in_one_paragraph_naming_each_and_the_flag(tmp_path):
    ckpt = _checkpoint(tmp_path, _cfg(), _samples(tmp_path))
    changed = _cfg(lora_alpha=16, train_batch_size=2, logit_mean=0.5, learning_rate=5e-5)
    with pytest.raises(UserError) as err:
        ro.check_options(ckpt, changed, log=print)
    text = str(err.value)
    assert "\n" not in text and "(step 4)" in text and "--allow_changed_options" in text
    for change in ("lora_alpha 4 -> 16", "train_batch_size 4 -> 2", "logit_mean 0.0 -> 0.5"):
        assert change in text
    assert "learning_rate" not in text  # free: not refused


def test_allow_changed_options_resumes_with_a_warning_and_records_the_forced_change(tmp_path):
    samples = _samples(tmp_path)
    ckpt = _checkpoint(tmp_path, _cfg(), samples)
    lines = []
    cfg = _cfg(lora_alpha=16, allow_changed_options=True)
    ro.check_options(ckpt, cfg, log=lines.append)
    assert len(lines) == 1 and "lora_alpha 4 -> 16" in lines[0]
    history = ro.resume_history(ckpt, cfg, samples, log=lines.append)
    assert history == [{"step": 4, "option": "lora_alpha", "old": 4, "new": 16, "forced": True}]


def test_free_changes_are_one_line_and_carried_in_the_history_across_resumes(tmp_path):
    samples = _samples(tmp_path)
    earlier = [{"step": 2, "option": "validation_steps", "old": 100, "new": 50}]
    ckpt = _checkpoint(tmp_path, _cfg(validation_steps=50), samples, history=earlier)
    lines = []
    cfg = _cfg(validation_steps=50, learning_rate=5e-5, resume_from_checkpoint="latest")
    ro.check_options(ckpt, cfg, log=lines.append)
    history = ro.resume_history(ckpt, cfg, samples, log=lines.append)
    assert lines == ["changed at step 4: learning_rate 0.0001 -> 5e-05"]  # resume_from_checkpoint is not a change
    assert history == earlier + [{"step": 4, "option": "learning_rate", "old": 1e-4, "new": 5e-5}]
    note = changed_options_note(history)
    assert "`validation_steps` 100 -> 50 at step 2" in note and "`learning_rate` 0.0001 -> 5e-05 at step 4" in note


@pytest.mark.parametrize("change", ["caption", "removed", "size"])
def test_a_changed_data_set_is_refused(tmp_path, change):
    samples = _samples(tmp_path)
    ckpt = _checkpoint(tmp_path, _cfg(), samples)
    if change == "caption":
        samples = _samples(tmp_path, captions=("a", "c"))
    elif change == "removed":
        samples = samples[:1]
    else:
        (tmp_path / "1.png").write_bytes(b"y" * 99)
    with pytest.raises(UserError, match="changed data: data set 2 samples"):
        ro.resume_history(ckpt, _cfg(), samples, log=print)


def test_the_same_files_in_another_folder_resume(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    ckpt = _checkpoint(tmp_path, _cfg(train_data_dir=str(tmp_path / "a")), _samples(tmp_path / "a"))
    lines = []
    history = ro.resume_history(ckpt, _cfg(train_data_dir=str(tmp_path / "b")), _samples(tmp_path / "b"), lines.append)
    assert [c["option"] for c in history] == ["train_data_dir"]


def test_a_checkpoint_without_recorded_options_resumes_with_one_line(tmp_path):
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    lines = []
    ro.check_options(folder, _cfg(lora_alpha=32), log=lines.append)
    assert len(lines) == 1 and "could not be compared" in lines[0]
    assert ro.resume_history(folder, _cfg(), [], lines.append) == [] and len(lines) == 1


def test_the_fingerprint_follows_the_listing_not_the_decoded_pixels(tmp_path):
    samples = _samples(tmp_path)
    assert ro.data_fingerprint(samples) == ro.data_fingerprint(list(samples))
    assert ro.data_fingerprint(samples) != ro.data_fingerprint(samples[::-1])  # the data position indexes the order


def test_a_video_qa_data_set_is_fingerprinted_by_its_videos_and_conversations(tmp_path):
    # a video LLM's samples have no caption or bucket: their conversation stands for the caption (the e2e resume of
    # the video LLMs failed with AttributeError before)
    from dit_lora.families.videollm.data import QASample

    video = tmp_path / "a.mp4"
    video.write_bytes(b"\0" * 10)
    talk = [{"role": "user", "content": "what?"}, {"role": "assistant", "content": "a cat"}]
    one = ro.data_fingerprint([QASample(key="a", video=video, messages=talk)])
    other = ro.data_fingerprint([QASample(key="a", video=video, messages=[talk[0], {
        "role": "assistant", "content": "a dog"}])])
    assert one != other
    video.write_bytes(b"\0" * 11)
    assert ro.data_fingerprint([QASample(key="a", video=video, messages=talk)]) != one


def test_a_resume_without_use_ema_is_refused_and_other_ema_options_are_free():
    """Dropping --use_ema on a resume would drop (and remove) the checkpoint's EMA: it is a fixed change; the decay
    and the other EMA options may change (recorded)."""
    saved = ro.options_record(_cfg(use_ema=True, ema_decay=0.95), [], [])
    fixed, free = ro.compare(saved, _cfg())
    assert [c["option"] for c in fixed] == ["use_ema"]
    assert [c["option"] for c in ro.compare(saved, _cfg(use_ema=True, ema_decay=0.99))[1]] == ["ema_decay"]
    assert free == [{"option": "ema_decay", "old": 0.95, "new": 0.9999}]
