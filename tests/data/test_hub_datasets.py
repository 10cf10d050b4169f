"""Tests for dit_lora.data.hub_datasets: image samples of a ``--dataset_name`` (local folder or Hub, offline)."""

from __future__ import annotations

import csv

import pytest
from PIL import Image

from dit_lora.data import load_samples, validate_samples
from dit_lora.core.errors import UserError
from data_files import Log, keys, make_image, write_jsonl


# ---------------------------------------------------------------------------------------------
# load_samples: datasets
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets
    import huggingface_hub.constants

    # The env vars are read at import time; patch the constants too in case datasets is already loaded.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)
    return str(tmp_path / "hf-cache")


def test_dataset_name_local_imagefolder(tmp_path, offline):
    folder = tmp_path / "ds"
    for i in range(3):
        make_image(folder / f"{i}.png", color=(i * 100, 50, 0))
    write_jsonl(folder / "metadata.jsonl", [{"file_name": f"{i}.png", "text": f"cap {i}"} for i in range(3)])
    samples = load_samples(dataset_name=str(folder), cache_dir=offline)
    assert keys(samples) == [f"{folder}[{i}]" for i in range(3)]
    assert [s.caption for s in samples] == ["cap 0", "cap 1", "cap 2"]
    assert all(s.path is None for s in samples)
    assert samples[2].open_image().getpixel((0, 0)) == (200, 50, 0)
    # same bytes + caption as the folder route, so caches are shared between the two
    assert samples[1].content_id() == load_samples(train_data_dir=folder)[1].content_id()
    assert validate_samples(samples, log=Log()) == samples
    assert len(load_samples(dataset_name=str(folder), cache_dir=offline, max_train_samples=2)) == 2

    with pytest.raises(UserError) as err:
        load_samples(dataset_name=str(folder), cache_dir=offline, caption_column="prompt")
    msg = str(err.value)
    assert "'image'" in msg and "'text'" in msg and "--caption_column" in msg
    with pytest.raises(UserError, match="--image_column"):
        load_samples(dataset_name=str(folder), cache_dir=offline, image_column="img")


def test_a_local_dataset_folder_with_a_link_out_of_it_is_refused_before_datasets_reads_it(tmp_path, offline,
                                                                                            monkeypatch):
    """`datasets` lists a folder itself, following links: a link to the parent cannot be left out, so it is refused."""
    import datasets

    folder = tmp_path / "ds"
    make_image(folder / "0.png")
    write_jsonl(folder / "metadata.jsonl", [{"file_name": "0.png", "text": "cap"}])
    (folder / "up").symlink_to(tmp_path)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets read the folder"))
    with pytest.raises(UserError) as err:
        load_samples(dataset_name=str(folder), cache_dir=offline)
    text = str(err.value)
    assert text.startswith(f"--dataset_name {str(folder)!r} holds 1 link(s) that lead out of the folder or loop "
                           f"(e.g. 'up' -> {tmp_path}), and `datasets` would follow them")
    assert "pass the folder as --train_data_dir" in text and "\n" not in text


def test_an_empty_train_data_dir_is_not_given(tmp_path, offline):
    """``--train_data_dir ""`` is no source (as the both-or-neither check reads it): the dataset is loaded, not the
    folder ``""``."""
    folder = tmp_path / "ds"
    make_image(folder / "0.png")
    write_jsonl(folder / "metadata.jsonl", [{"file_name": "0.png", "text": "cap 0"}])
    samples = load_samples(train_data_dir="", dataset_name=str(folder), cache_dir=offline)
    assert [s.caption for s in samples] == ["cap 0"]


def test_dataset_name_load_failure_is_user_error(tmp_path, offline):
    with pytest.raises(UserError) as err:
        load_samples(dataset_name="nobody/no-such-dataset-xyz", cache_dir=offline)
    msg = str(err.value)
    assert "nobody/no-such-dataset-xyz" in msg and "--train_data_dir" in msg and "--dataset_name" in msg


def _watch_opens(monkeypatch):
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda fp, *a, **k: opened.append(str(fp)) or real_open(fp, *a, **k))
    return opened


def test_dataset_name_folder_path_strings_leaving_it_are_quarantined_and_never_opened(tmp_path, offline,
                                                                                      monkeypatch):
    folder = tmp_path / "ds"
    make_image(folder / "a.png")
    secret = make_image(tmp_path / "outside" / "secret.png", color=(0, 0, 255))
    with open(folder / "train.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([["image", "text"], ["a.png", "in"], ["../outside/secret.png", "up"],
                                      [str(secret), "absolute"], [str(folder / "a.png"), "absolute, inside"]])
    opened = _watch_opens(monkeypatch)
    samples = load_samples(dataset_name=str(folder), cache_dir=offline)
    assert [s.refused is None for s in samples] == [True, False, False, True]
    log, quarantine = Log(), []
    good = validate_samples(samples, log=log, quarantine=quarantine, max_bad_samples_fraction=1.0, num_workers=1)
    assert keys(good) == [f"{folder}[0]", f"{folder}[3]"]
    assert not [path for path in opened if "outside" in path]
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert reasons[f"{folder}[1]"].startswith(f"row 1: image '../outside/secret.png' leaves the data folder {folder}")
    assert "refused, never opened" in reasons[f"{folder}[2]"] and str(secret) in log.text


def _fake_hub_dataset(monkeypatch, tmp_path, cells, snapshot=True):
    """``owner/pics`` as a Hub dataset of path strings; its repository's snapshot (``images/a.png``) in a Hub
    cache under tmp_path when ``snapshot``. Returns the snapshot folder."""
    import datasets
    import huggingface_hub.constants

    from dit_lora.data import hub_datasets

    cache = tmp_path / "hub"
    repo = cache / "datasets--owner--pics"
    folder = repo / "snapshots" / ("0" * 40)
    if snapshot:
        make_image(folder / "images" / "a.png", color=(0, 255, 0))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    table = datasets.Dataset.from_dict({"image": cells, "text": [f"c{i}" for i in range(len(cells))]})
    monkeypatch.setattr(hub_datasets, "open_dataset", lambda *a, **k: table)
    return folder


def test_hub_dataset_path_strings_stay_inside_its_own_files(tmp_path, offline, monkeypatch):
    # In the working directory a file of the same name: a Hub dataset's path never names it.
    make_image(tmp_path / "cwd" / "images" / "a.png", color=(255, 0, 0))
    make_image(tmp_path / "cwd" / "b.png")
    monkeypatch.chdir(tmp_path / "cwd")
    folder = _fake_hub_dataset(monkeypatch, tmp_path, ["images/a.png", "../../../../cwd/b.png",
                                                      str(tmp_path / "cwd" / "b.png")])
    opened = _watch_opens(monkeypatch)
    samples = load_samples(dataset_name="owner/pics", cache_dir=offline)
    assert samples[0].refused is None and samples[0].open_image().getpixel((0, 0)) == (0, 255, 0)
    assert opened == [str(folder / "images" / "a.png")]
    for row, sample in enumerate(samples[1:], 1):
        assert sample.refused.startswith(f"row {row}: image ") and f"leaves the data folder {folder}" in sample.refused
        assert "Hub dataset 'owner/pics'" in sample.refused
    with pytest.raises(ValueError, match="never opened"):
        samples[2].content_id()


def test_hub_dataset_path_strings_without_its_files_here_are_refused(tmp_path, offline, monkeypatch):
    make_image(tmp_path / "images" / "a.png")
    monkeypatch.chdir(tmp_path)  # the old rule read this file, joined onto the working directory
    _fake_hub_dataset(monkeypatch, tmp_path, ["images/a.png", str(tmp_path / "images" / "a.png")], snapshot=False)
    samples = load_samples(dataset_name="owner/pics", cache_dir=offline)
    assert all(s.refused and "hf download owner/pics --repo-type dataset" in s.refused for s in samples)
    assert "(refused, never opened)" in samples[0].refused and samples[0].refused.startswith(
        "row 0: image 'images/a.png' is a path, and Hub dataset 'owner/pics' has no files in the Hugging Face cache")


# ---------------------------------------------------------------------------------------------
# save_to_disk folders, single data files, bare builder names
# ---------------------------------------------------------------------------------------------


def _image_dataset(tmp_path, n=3):
    import datasets

    paths = [str(make_image(tmp_path / "src" / f"{i}.png", color=(i * 80, 0, 0)))
             for i in range(n)]
    return datasets.Dataset.from_dict({"image": paths, "text": [f"cap {i}" for i in range(n)]}).cast_column(
        "image", datasets.Image())


def test_save_to_disk_dataset_and_dataset_dict(tmp_path, offline):
    import datasets

    ds = _image_dataset(tmp_path)
    ds.save_to_disk(str(tmp_path / "saved"))
    samples = load_samples(dataset_name=str(tmp_path / "saved"), cache_dir=offline)
    assert [s.caption for s in samples] == ["cap 0", "cap 1", "cap 2"]
    assert samples[2].open_image().size == (16, 12)
    datasets.DatasetDict({"train": ds.select([0, 1]), "test": ds.select([2])}).save_to_disk(str(tmp_path / "dd"))
    assert [s.caption for s in load_samples(dataset_name=str(tmp_path / "dd"), cache_dir=offline)] == ["cap 0", "cap 1"]
    datasets.DatasetDict({"validation": ds, "test": ds}).save_to_disk(str(tmp_path / "nt"))
    with pytest.raises(UserError) as err:
        load_samples(dataset_name=str(tmp_path / "nt"), cache_dir=offline)
    assert "'validation', 'test'" in str(err.value) and "--dataset_split" in str(err.value)
    picked = load_samples(dataset_name=str(tmp_path / "nt"), dataset_split="test", cache_dir=offline)
    assert len(picked) == 3


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".json", ".jsonl"])
def test_single_data_file_with_paths_relative_to_its_folder(tmp_path, offline, suffix):
    import pandas as pd

    folder = tmp_path / "data"
    for i in range(2):
        make_image(folder / "img" / f"{i}.png", color=(0, i * 90, 0))
    frame = pd.DataFrame({"image": ["img/0.png", "../outside.png"], "text": ["zero", "one"]})
    file = folder / f"train{suffix}"
    {".parquet": lambda: frame.to_parquet(file), ".csv": lambda: frame.to_csv(file, index=False),
     ".json": lambda: frame.to_json(file, orient="records"),
     ".jsonl": lambda: frame.to_json(file, orient="records", lines=True)}[suffix]()
    samples = load_samples(dataset_name=str(file), cache_dir=offline)
    assert [s.caption for s in samples] == ["zero", "one"]
    assert samples[0].source() == str(folder / "img" / "0.png")
    assert samples[1].refused is not None and "leaves the data folder" in samples[1].refused


def test_bare_builder_name_is_refused_without_reading_the_working_directory(tmp_path, offline, monkeypatch):
    import pandas as pd

    pd.DataFrame({"image": ["x.png"], "text": ["x"]}).to_parquet(tmp_path / "stray.parquet")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        load_samples(dataset_name="parquet", cache_dir=offline)
    assert "names a `datasets` file format" in str(err.value) and "--dataset_name data/train.parquet" in str(err.value)


def test_instance_prompt_captions_every_row(tmp_path, offline):
    ds = _image_dataset(tmp_path).remove_columns(["text"])
    ds.save_to_disk(str(tmp_path / "saved"))
    log = Log()
    samples = load_samples(dataset_name=str(tmp_path / "saved"), instance_prompt="a photo of sks dog",
                           cache_dir=offline, log=log)
    assert [s.caption for s in samples] == ["a photo of sks dog"] * 3 and "--instance_prompt: all 3 row(s)" in log.text


def test_caption_extension_is_refused_for_a_dataset_not_ignored(tmp_path, offline):
    _image_dataset(tmp_path).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(UserError) as err:
        load_samples(dataset_name=str(tmp_path / "saved"), caption_extension=".caption", cache_dir=offline)
    assert "--caption_extension .caption names the caption file beside each image" in str(err.value)
    assert "--caption_column 'text'" in str(err.value)


def test_instance_prompt_with_an_explicit_caption_column_fills_only_the_empty_captions(tmp_path, offline):
    # diffusers' DreamBoothDataset: with --caption_column the column is read and the instance prompt only stands in for
    # an empty caption; dit-lora used to throw the column away
    ds = _image_dataset(tmp_path)
    ds = ds.map(lambda row, i: {"prompt": "" if i == 1 else f"own {i}"}, with_indices=True)
    ds.save_to_disk(str(tmp_path / "saved"))
    log = Log()
    samples = load_samples(dataset_name=str(tmp_path / "saved"), caption_column="prompt", caption_column_given=True,
                           instance_prompt="a photo of sks dog", cache_dir=offline, log=log)
    assert [s.caption for s in samples] == ["own 0", "a photo of sks dog", "own 2"]
    assert "2 row(s) of --dataset_name keep their own caption, 1 empty one(s) take 'a photo of sks dog'" in log.text
    # without an explicit column the prompt captions every row, as before (and says how to keep the column)
    samples = load_samples(dataset_name=str(tmp_path / "saved"), caption_column="prompt",
                           instance_prompt="a photo of sks dog", cache_dir=offline, log=Log())
    assert {s.caption for s in samples} == {"a photo of sks dog"}
