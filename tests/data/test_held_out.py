"""The held-out samples of the validation loss (dit_lora.data.held_out): the split by seed and name, its refusals, a
separate folder read through the training data's own handler, and the two sources refused together."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from dit_lora.config import TrainConfig, parse_config
from dit_lora.core.errors import UserError
from dit_lora.data import held_out
from dit_lora.data.image_media import ImageMedia
from dit_lora.data.sources import RawSample
from dit_lora.registry import get_spec


def _samples(n: int) -> list[RawSample]:
    return [RawSample(key=f"img_{i:03d}.png", caption=f"caption {i}") for i in range(n)]


def _held_keys(samples, fraction, seed) -> set[str]:
    return {s.key for s, f in zip(samples, held_out.split_flags(samples, fraction, seed)) if f}


def test_the_split_is_a_function_of_seed_and_names_only():
    samples = _samples(40)
    held = _held_keys(samples, 0.1, seed=0)
    assert len(held) == 4  # round(0.1 * 40)
    assert _held_keys(samples, 0.1, seed=0) == held  # the same in every run
    shuffled = random.Random(1).sample(samples, len(samples))  # another listing order, another process's view
    assert _held_keys(shuffled, 0.1, seed=0) == held
    assert _held_keys(samples, 0.1, seed=1) != held  # another seed, other samples
    # a larger fraction holds out a superset (files ranked once): the held-out curve of 0.1 is part of 0.2's
    assert held < _held_keys(samples, 0.2, seed=0)
    # one file more moves at most the cut, never the others' ranks
    assert len(_held_keys(samples + _samples(41)[40:], 0.1, seed=0) ^ held) <= 1


def test_a_kohya_files_copies_stay_together_and_count_once():
    base = _samples(10)
    listed = []
    for s in base:
        listed += [s] + [RawSample(key=s.key, caption=s.caption, repeat=r) for r in (1, 2)]  # 3 copies each
    flags = held_out.split_flags(listed, 0.2, seed=0)
    by_key: dict[str, set[bool]] = {}
    for s, f in zip(listed, flags):
        by_key.setdefault(s.key, set()).add(f)
    assert all(len(v) == 1 for v in by_key.values())  # never a file on both sides
    held = [s for s, f in zip(listed, flags) if f]
    assert len(held) == 6 and len(held_out.first_copies(held)) == 2  # 2 of 10 files, evaluated once each
    assert _held_keys(base, 0.2, seed=0) == {s.key for s in held}  # the copies change nothing about which


def _cfg(**values):
    return TrainConfig.for_family("sana", seed=0, resolution=64, **values)


def test_a_split_that_leaves_no_held_out_or_no_training_file_is_refused_and_few_are_warned():
    with pytest.raises(UserError, match=r"--validation_split 0.05 of the 9 usable training sample.*holds out 0.*at least "
                                        r"--validation_split 0.056 here.*--validation_data_dir"):
        held_out.choose(None, _samples(9), _cfg(validation_split=0.05), log=print, quarantine=[])
    with pytest.raises(UserError, match=r"holds out 1 and leaves 0 to train on: training needs at least one sample"):
        held_out.choose(None, _samples(1), _cfg(validation_split=0.5), log=print, quarantine=[])
    lines: list[str] = []
    train, held = held_out.choose(None, _samples(10), _cfg(validation_split=0.2), log=lines.append, quarantine=[])
    assert len(train) == 8 and len(held) == 2 and not {s.key for s in train} & {s.key for s in held}
    assert "2 of 10 usable sample(s) held out (--validation_split 0.2" in lines[0] and "warning: a mean over 2" in lines[0]
    lines.clear()
    held_out.choose(None, _samples(50), _cfg(validation_split=0.1), log=lines.append, quarantine=[])
    assert "warning" not in lines[0]
    assert held_out.choose(None, _samples(3), _cfg(), log=lines.append, quarantine=[]) == (_samples(3), [])


def test_the_split_and_the_folder_are_refused_together_in_one_paragraph(tmp_path):
    args = ["--pretrained_model_name_or_path", str(tmp_path), "--train_data_dir", str(tmp_path),
            "--validation_split", "0.1", "--validation_data_dir", str(tmp_path)]
    with pytest.raises(UserError, match=r"--validation_split 0.1 and --validation_data_dir .* both name the "
                                        r"held-out samples.*Give one of them"):
        parse_config(args)
    with pytest.raises(UserError, match=r"validation_split"):
        parse_config(args[:4] + ["--validation_split", "0.6"])  # at most half


def test_a_separate_folder_is_read_as_the_training_data_each_file_once(shapes_data, tmp_path):
    """Held-out images in a kohya repeat folder, one unreadable: listed and screened by the training handler (its
    buckets), each file once, the unreadable one quarantined with its source; a file the training data also has is
    warned about."""
    folder = tmp_path / "held"
    (folder / "3_shape").mkdir(parents=True)
    rows = [json.loads(line) for line in (shapes_data / "metadata.jsonl").read_text().splitlines()]
    for row in rows[:3]:
        shutil.copy(shapes_data / row["file_name"], folder / "3_shape" / row["file_name"])
        (folder / "3_shape" / row["file_name"]).with_suffix(".txt").write_text(row["text"])
    (folder / "3_shape" / "broken.png").write_bytes(b"not a png")
    (folder / "3_shape" / "broken.txt").write_text("broken")
    cfg = _cfg(train_data_dir=str(shapes_data), validation_data_dir=str(folder), max_train_samples=2)
    assert held_out.folder_config(cfg).data.train_data_dir == str(folder)
    assert held_out.folder_config(cfg).data.max_train_samples is None  # every held-out file
    media = ImageMedia(cfg, get_spec("sana"))
    lines: list[str] = []
    quarantine: list[dict] = []
    train, held = held_out.choose(media, ["training samples"], cfg, log=lines.append, quarantine=quarantine)
    assert train == ["training samples"]
    assert sorted(s.key for s in held) == sorted(f"3_shape/{row['file_name']}" for row in rows[:3])
    assert all(s.bucket == (64, 64) and s.repeat == 0 for s in held)  # screened and bucketed as training data
    assert [(q["key"], q["source"]) for q in quarantine] == [("3_shape/broken.png", "--validation_data_dir")]
    assert any(line.startswith("held-out (--validation_data_dir") for line in lines)
    assert "3 held-out sample(s) from --validation_data_dir" in lines[-1] and "1 left out" in lines[-1]
    same = held_out.shared_line(["a", "b"], ["b", "c"], held[:2])
    assert same is not None and held[0].key in same and held[1].key not in same
    assert held_out.shared_line(["a"], ["c"], held[:1]) is None


def test_an_empty_or_missing_folder_is_one_paragraph_naming_the_option(shapes_data, tmp_path):
    (tmp_path / "empty").mkdir()
    for folder, reason in ((tmp_path / "missing", "cannot be used"), (tmp_path / "empty", "cannot be used")):
        cfg = _cfg(train_data_dir=str(shapes_data), validation_data_dir=str(folder))
        with pytest.raises(UserError, match=rf"--validation_data_dir `{folder}` \(the held-out data.*{reason}"):
            held_out.choose(ImageMedia(cfg, get_spec("sana")), [], cfg, log=print, quarantine=[])


def test_sample_seeds_differ_by_seed_and_key_and_fit_a_generator():
    import torch

    seeds = {held_out.sample_seed(s, k) for s in (0, 1) for k in ("a.png", "b.png")}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)
    torch.Generator().manual_seed(max(seeds))  # accepted as is


def test_a_validation_data_dir_that_does_not_exist_is_refused_before_anything_loads(tmp_path):
    from dit_lora.config.schema import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.data.held_out import check_options

    missing = str(tmp_path / "nope")
    with pytest.raises(UserError, match=r"--validation_data_dir '.*nope' does not exist.*--validation_split"):
        check_options(TrainConfig.for_family("sana", train_data_dir=str(tmp_path), validation_data_dir=missing).data)
    check_options(TrainConfig.for_family("sana", train_data_dir=str(tmp_path), validation_data_dir=str(tmp_path)).data)
    check_options(TrainConfig.for_family("sana", dataset_name="user/set", validation_data_dir="user/held").data)
