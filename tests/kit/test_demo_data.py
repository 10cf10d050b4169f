"""kit/demo_data.py: the sizes a refused ``--resolution`` is told to use, and the demo data drawn
into an empty ``--train_data_dir`` only (a user's own folder kept as it is, and said)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dit_lora.core.errors import UserError
from dit_lora.kit import demo_data as kit
from dit_lora.kit.demo_data import build_demo_model, demo_clips, demo_data, nearest_sizes


def test_nearest_sizes_name_both_multiples_or_only_the_first():
    assert nearest_sizes(520, 16) == "512 or 528"
    assert nearest_sizes(8, 16) == "16"


def _cfg(directory):
    return SimpleNamespace(data=SimpleNamespace(train_data_dir=directory, resolution=32),
                           model=SimpleNamespace(demo_num_images=2))


def test_an_empty_folder_gets_the_demo_data(tmp_path):
    drawn = []
    assert demo_data(_cfg(str(tmp_path / "new")), draw=drawn.append) is True
    assert drawn == [str(tmp_path / "new")]


def test_a_user_folder_is_kept_and_said(tmp_path, capsys):
    (tmp_path / "mine.png").write_bytes(b"not drawn by the demo")
    drawn = []
    assert demo_data(_cfg(str(tmp_path)), draw=drawn.append) is False
    assert drawn == [] and (tmp_path / "mine.png").read_bytes() == b"not drawn by the demo"
    assert f"--train_data_dir {tmp_path} already holds data; training on it as it is" in capsys.readouterr().out


def test_no_folder_draws_nothing():
    assert demo_data(_cfg(None), draw=lambda d: (_ for _ in ()).throw(AssertionError("drawn"))) is False


def test_a_folder_the_tiny_builder_did_not_make_is_refused_in_one_paragraph():
    def build():
        raise FileExistsError("`m` is not a tiny model folder")

    with pytest.raises(UserError, match=r"^--demo: `m` is not a tiny model folder\. Choose another "
                                        r"--pretrained_model_name_or_path for the demo model\.$"):
        build_demo_model(build)


def test_demo_clips_have_the_longest_buckets_frames_and_only_with_a_folder(monkeypatch, tmp_path):
    made = []
    monkeypatch.setattr(kit, "build_demo_clips", lambda directory, **kw: made.append((directory, kw)))
    video = SimpleNamespace(video_buckets=lambda cfg: [(9, 64, 64), (17, 48, 80)])
    demo_clips(_cfg(None), video, 64, fps=16)
    assert made == []
    demo_clips(_cfg(str(tmp_path)), video, 64, fps=16)
    assert made == [(str(tmp_path), {"n": 2, "num_frames": 17, "size": 64, "fps": 16, "sound": "none",
                                     "references": False})]
    demo_clips(_cfg(str(tmp_path)), video, 64, fps=24, sound="mixed")  # LTX-2's: a tone on every other clip
    assert made[-1][1]["sound"] == "mixed" and made[-1][1]["fps"] == 24
    demo_clips(_cfg(str(tmp_path)), video, 64, fps=24, references=True)  # LTX-2 IC-LoRA's: each with its reference
    assert made[-1][1]["references"] is True
