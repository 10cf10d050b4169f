"""``dit-lora caption`` start to end on a tiny Qwen2.5-VL: a mixed folder captioned, existing captions kept, a
broken file named, --dry_run writing nothing, --metadata, and a run killed at an instant it did not choose resumed
with no caption written twice or lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dit_lora.captioning import run as run_module
from dit_lora.captioning.options import CaptionOptions
from dit_lora.captioning.run import caption_folder
from dit_lora.captioning.writer import JOURNAL, METADATA
from dit_lora.data.synthetic.clips import write_moving_square_clip
from dit_lora.families.videollm.spec import build_demo_model

from helpers import ROOT


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_demo_model("qwen2_5_vl", tmp_path_factory.mktemp("run") / "tiny")


def _folder(root: Path, images: int = 3, clips: int = 2) -> Path:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(images):
        Image.fromarray(rng.integers(0, 256, (24 + 8 * i, 40, 3), dtype=np.uint8)).save(root / f"img{i}.png")
    for i in range(clips):
        write_moving_square_clip(root / "clips" / f"c{i}.mp4", color=["red", "blue"][i % 2],
                                 direction="left to right", num_frames=8, size=32)
    return root


def _options(path: Path, tiny: Path, **values) -> CaptionOptions:
    base = {"path": path, "model": str(tiny), "max_new_tokens": 6, "num_frames": 2, "mixed_precision": "no",
            "device": "cpu", "batch_size": 2}
    return CaptionOptions(**{**base, **values}).resolved()


def test_a_mixed_folder_is_captioned_then_kept(tiny, tmp_path, monkeypatch):
    folder = _folder(tmp_path / "data")
    (folder / "broken.png").write_bytes(b"not an image")
    (folder / "img1.txt").write_text("my own caption")
    outcome = caption_folder(_options(folder, tiny, prefix="sks, ", suffix="."))
    assert sorted(outcome.written) == ["clips/c0.mp4", "clips/c1.mp4", "img0.png", "img2.png"]
    assert outcome.kept == 1 and (folder / "img1.txt").read_text() == "my own caption"
    assert [key for key, _ in outcome.failed] == ["broken.png"] and "not a readable image" in outcome.failed[0][1]
    for key, text in outcome.written.items():
        written = (folder / key).with_suffix(".txt").read_text()
        assert written == text and text.startswith("sks, ") and text.endswith(".") and len(text) > 6
    assert (folder / JOURNAL).is_file()  # a file failed: the journal stays for the retry

    (folder / "broken.png").unlink()
    monkeypatch.setattr(run_module, "load_captioner", lambda *a, **k: pytest.fail("nothing to caption"))
    again = caption_folder(_options(folder, tiny, prefix="sks, ", suffix="."))
    assert again.written == {} and again.kept == 1 and len(again.resumed) == 4 and not again.failed
    assert not (folder / JOURNAL).exists()  # everything done: the journal goes


def test_overwrite_replaces_and_dry_run_writes_nothing(tiny, tmp_path, capsys):
    folder = _folder(tmp_path / "data", images=2, clips=1)
    for name in ("img0", "img1", "clips/c0"):
        (folder / f"{name}.txt").write_text("old")
    dry = caption_folder(_options(folder, tiny, overwrite=True, dry_run=2))
    said = capsys.readouterr().out
    assert "replacing: 2 existing caption(s) (--overwrite)" in said
    assert "frames larger than 921,600 pixels (--max_pixels) are scaled down for the captioner" in said
    assert len(dry.written) == 2 and all(t != "old" for t in dry.written.values())
    assert {p.read_text() for p in folder.rglob("*.txt")} == {"old"} and not (folder / JOURNAL).exists()
    done = caption_folder(_options(folder, tiny, overwrite=True))
    assert len(done.written) == 3 and done.kept == 0
    assert {k: (folder / k).with_suffix(".txt").read_text() for k in done.written} == done.written
    assert {k: done.written[k] for k in dry.written} == dry.written  # greedy: the dry run's captions are the run's


def test_one_file_with_metadata_is_refused(tiny, tmp_path):
    from dit_lora.core.errors import UserError

    folder = _folder(tmp_path / "data", images=1, clips=0)
    with pytest.raises(UserError, match="pass that folder, not one file"):
        caption_folder(_options(folder / "img0.png", tiny, metadata=True))
    assert caption_folder(_options(folder / "img0.png", tiny)).written.keys() == {"img0.png"}


def test_metadata_jsonl_holds_one_row_per_file(tiny, tmp_path):
    folder = _folder(tmp_path / "data", images=2, clips=1)
    (folder / METADATA).write_text(json.dumps({"file_name": "img0.png", "text": "kept", "tag": 1}) + "\n")
    outcome = caption_folder(_options(folder, tiny, metadata=True))
    rows = [json.loads(line) for line in (folder / METADATA).read_text().splitlines()]
    assert rows[0] == {"file_name": "img0.png", "text": "kept", "tag": 1} and outcome.kept == 1
    assert {r["file_name"]: r["text"] for r in rows[1:]} == outcome.written
    assert not list(folder.rglob("*.txt")) and not (folder / JOURNAL).exists()


def test_a_killed_run_resumes_with_no_caption_written_twice_or_lost(tiny, tmp_path):
    folder = _folder(tmp_path / "killed", images=6, clips=2)
    reference = shutil.copytree(folder, tmp_path / "whole")
    args = [sys.executable, "-m", "dit_lora", "caption", str(folder), "--model", str(tiny), "--max_new_tokens", "6",
            "--num_frames", "2", "--mixed_precision", "no", "--device", "cpu", "--batch_size", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = folder / JOURNAL
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.is_file() and journal.read_text().count("\n") >= 3:  # the options and two files, maybe more
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = [json.loads(line)["file_name"] for line in journal.read_text().splitlines()[1:] if line.endswith("}")]
    assert 2 <= len(first) < 8, "the run was not killed midway"

    resumed = caption_folder(_options(folder, tiny, batch_size=1))
    assert set(resumed.written).isdisjoint(first)  # nothing captioned twice
    # every file once: captioned now, resumed from the journal, or kept (killed between its caption and its line)
    assert len(resumed.written) + len(resumed.resumed) + resumed.kept == 8 and resumed.kept <= 1
    whole = caption_folder(_options(reference, tiny, batch_size=1))
    # the interrupted-and-resumed folder holds exactly the captions of an uninterrupted run
    captions = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*.txt")}
    assert captions == {Path(k).with_suffix(".txt").as_posix(): text for k, text in whole.written.items()}
    assert not journal.exists()


def _failing_second_batch(error: BaseException):
    """``Captioner.generate`` that raises ``error`` at its second call (the calls so far in ``.calls``)."""
    from dit_lora.captioning.captioner import Captioner

    original = Captioner.generate

    def generate(self, built):
        generate.calls.append(len(built))  # type: ignore[attr-defined]
        if len(generate.calls) == 2:  # type: ignore[attr-defined]
            raise error
        return original(self, built)

    generate.calls = []  # type: ignore[attr-defined]
    return generate


def test_ctrl_c_keeps_what_was_written_and_the_rerun_captions_the_rest(tiny, tmp_path, monkeypatch):
    from dit_lora.captioning.captioner import Captioner
    from dit_lora.core.errors import Interrupted

    folder = _folder(tmp_path / "data", images=4, clips=0)
    original = Captioner.generate
    interrupted_second_batch = _failing_second_batch(KeyboardInterrupt())

    monkeypatch.setattr(Captioner, "generate", interrupted_second_batch)
    with pytest.raises(Interrupted, match=r"after 2 caption\(s\) of 4; they are kept. Run the same command") as err:
        caption_folder(_options(folder, tiny))
    assert err.value.exit_code == 130 and len(list(folder.glob("*.txt"))) == 2
    monkeypatch.setattr(Captioner, "generate", original)
    rest = caption_folder(_options(folder, tiny))
    assert len(rest.written) == 2 and len(rest.resumed) == 2 and len(list(folder.glob("*.txt"))) == 4

    # --metadata: what was captioned before Ctrl-C is in metadata.jsonl, where training reads it
    monkeypatch.setattr(Captioner, "generate", _failing_second_batch(KeyboardInterrupt()))
    other = _folder(tmp_path / "other", images=4, clips=0)
    with pytest.raises(Interrupted):
        caption_folder(_options(other, tiny, metadata=True))
    assert len((other / METADATA).read_text().splitlines()) == 2


@pytest.fixture
def small_disk(tmp_path):
    """A folder on its own 64 KiB tmpfs (root), remountable read-only."""
    import subprocess as sp

    path = tmp_path / "disk"
    path.mkdir()
    if os.geteuid() != 0 or sp.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
                                   capture_output=True).returncode != 0:
        pytest.fail("these tests mount a tmpfs: run them as root (CI does)")
    yield path
    sp.run(["umount", "-l", str(path)], check=True)


def test_a_read_only_folder_is_refused_before_the_model_loads(tiny, small_disk, monkeypatch):
    import subprocess as sp

    from dit_lora.core.errors import UserError

    _folder(small_disk, images=1, clips=0)
    sp.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    monkeypatch.setattr(run_module, "load_captioner", lambda *a, **k: pytest.fail("loaded before the check"))
    with pytest.raises(UserError, match=r"`PATH .*` is not writable \(read-only file system\).*--dry_run"):
        caption_folder(_options(small_disk, tiny))
    monkeypatch.undo()
    assert caption_folder(_options(small_disk, tiny, dry_run=1)).written  # a dry run writes nothing: it runs


def test_a_full_disk_is_one_paragraph_and_the_captions_written_stay(tiny, small_disk):
    from dit_lora.core.fileio import DiskFullError

    _folder(small_disk, images=3, clips=0)
    filler = small_disk / "filler.bin"
    with open(filler, "wb", buffering=0) as out:  # everything but about 2 pages: the journal's first line fits, not much more
        try:
            while True:
                out.write(b"\0" * 1024)

        except OSError:
            pass
    filler.write_bytes(filler.read_bytes()[: -8192])
    with pytest.raises(DiskFullError, match="No space left on device while writing captions to .*run the same command again"):
        caption_folder(_options(small_disk, tiny, batch_size=1, max_new_tokens=40))
    assert not list(small_disk.glob(".*.tmp"))  # no half-written caption left behind


def test_a_batch_out_of_memory_is_captioned_file_by_file_and_a_file_too_large_alone_fails(tiny, tmp_path,
                                                                                           monkeypatch):
    import torch

    from dit_lora.captioning.captioner import Captioner

    folder = _folder(tmp_path / "data", images=4, clips=0)
    original, sizes = Captioner.generate, []

    def out_of_memory(self, built):  # a batch of two never fits; the fourth file tried alone (img3) not even alone
        sizes.append(len(built))
        if len(built) > 1 or sizes.count(1) == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return original(self, built)

    monkeypatch.setattr(Captioner, "generate", out_of_memory)
    outcome = caption_folder(_options(folder, tiny))
    assert sizes == [2, 1, 1, 2, 1, 1]  # each batch tried whole, then file by file
    assert sorted(outcome.written) == ["img0.png", "img1.png", "img2.png"]
    assert outcome.failed == [("img3.png", run_module.TOO_LARGE)]


def test_when_nothing_fits_the_run_stops_at_the_first_file_in_one_paragraph(tiny, tmp_path, monkeypatch):
    import torch

    from dit_lora.captioning.captioner import Captioner
    from dit_lora.core.errors import UserError

    folder = _folder(tmp_path / "data", images=4, clips=0)
    calls = []

    def never_fits(self, built):
        calls.append(len(built))
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(Captioner, "generate", never_fits)
    with pytest.raises(UserError, match=r"out of device memory captioning img0.png alone, before any caption was "
                                        r"written. Lower --max_pixels"):
        caption_folder(_options(folder, tiny))
    assert calls == [2, 1]  # the batch, then its first file: not the whole folder
    monkeypatch.undo()
    # the rerun with less of each file is no other kind of caption: the journal takes it
    assert caption_folder(_options(folder, tiny, max_pixels=400, num_frames=1)).written.keys() == {
        "img0.png", "img1.png", "img2.png", "img3.png"}


def test_one_file_is_judged_by_its_own_folder_not_the_tree(tiny, tmp_path):
    folder = _folder(tmp_path / "data", images=1, clips=0)
    (folder / "other").mkdir()
    (folder / "other" / METADATA).write_text('{"file_name": "x.png", "text": "x"}\n')
    assert caption_folder(_options(folder / "img0.png", tiny)).written.keys() == {"img0.png"}


def test_a_hand_edit_between_an_interrupted_metadata_run_and_its_rerun_stays(tiny, tmp_path, monkeypatch):
    from dit_lora.captioning.captioner import Captioner
    from dit_lora.core.errors import Interrupted

    folder = _folder(tmp_path / "data", images=4, clips=0)
    monkeypatch.setattr(Captioner, "generate", _failing_second_batch(KeyboardInterrupt()))
    with pytest.raises(Interrupted):
        caption_folder(_options(folder, tiny, metadata=True))
    monkeypatch.undo()
    rows = [json.loads(line) for line in (folder / METADATA).read_text().splitlines()]
    assert [r["file_name"] for r in rows] == ["img0.png", "img1.png"]  # merged at the interruption
    rows[0]["text"] = "fixed by hand"
    (folder / METADATA).write_text("".join(json.dumps(r) + "\n" for r in rows))
    rest = caption_folder(_options(folder, tiny, metadata=True))
    assert sorted(rest.written) == ["img2.png", "img3.png"] and sorted(rest.resumed) == ["img0.png", "img1.png"]
    final = {r["file_name"]: r["text"] for r in map(json.loads, (folder / METADATA).read_text().splitlines())}
    assert final["img0.png"] == "fixed by hand" and len(final) == 4 and not (folder / JOURNAL).exists()


def test_control_characters_are_never_written_and_training_reads_every_caption(tiny, tmp_path, monkeypatch, capsys):
    """The issue: a tiny captioner wrote NUL and other control bytes, the run said "0 failed", and training refused the
    captions (blaming UTF-16). Removed and said; a caption of nothing but control characters is a failure, named."""
    from dit_lora.captioning.captioner import Caption, Captioner
    from dit_lora.data import load_samples
    from dit_lora.data.caption_files import refuse_unreadable_captions

    texts = iter(["a red\x00 square\x1b[0m", "\ufffd\x11a blue one\x85", "\x00\x01\x02", "a plain caption"])
    monkeypatch.setattr(Captioner, "generate", lambda self, built: [Caption(next(texts), True) for _ in built])
    folder = _folder(tmp_path / "data", images=4, clips=0)
    outcome = caption_folder(_options(folder, tiny, batch_size=1))
    out = capsys.readouterr().out
    assert outcome.written == {"img0.png": "a red square[0m", "img1.png": "a blue one", "img3.png": "a plain caption"}
    assert outcome.failed == [("img2.png", "the captioner wrote no text, only 3 control character(s)")]
    assert not (folder / "img2.txt").exists()
    assert "cleaned: 2 caption(s) held control characters" in out and "5 in all" in out
    (folder / "img2.png").unlink()  # the user's move: caption it by hand, or leave it out
    samples = load_samples(train_data_dir=folder, log=lambda line: None)
    refuse_unreadable_captions(samples, "--train_data_dir data")  # every written caption is read
    assert {s.key: s.caption for s in samples if s.caption} == outcome.written
