"""Class names that are the model's own keep their pretrained rows; other counts are refused before the model
loads; pickle-only weights are refused before anything is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.families.dit.classes import imagenet_wnids, map_to_pretrained, pretrained_labels


def _class_folders(root: Path, names: list[str], per_class: int = 2) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (64, 64), (40 * i, 90, 200)).save(root / name / f"{i}.png")
    return root


def _cfg(model: Path, data: Path, **kw) -> TrainConfig:
    return TrainConfig.for_family("dit", pretrained_model_name_or_path=str(model), train_data_dir=str(data),
                                  resolution=64, mixed_precision="no", rank=4, lora_alpha=4, **kw)


def _with_synonyms(tiny_dit: Path, tmp_path: Path) -> Path:
    """The tiny DiT with ImageNet's real id2label strings for the first classes (as the Hub's model_index.json)."""
    import shutil

    model = tmp_path / "dit"
    shutil.copytree(tiny_dit, model)
    index = json.loads((model / "model_index.json").read_text())
    index["id2label"].update({"0": "tench, Tinca tinca", "1": "goldfish, Carassius auratus",
                              "2": "great white shark, white shark, man-eater, man-eating shark, Carcharodon carcharias"})
    (model / "model_index.json").write_text(json.dumps(index))
    return model


def test_the_shipped_wnid_list_is_imagenet_1k_in_index_order():
    wnids = imagenet_wnids()
    assert len(wnids) == len(set(wnids)) == 1000 and list(wnids) == sorted(wnids)
    assert wnids[0] == "n01440764" and wnids[1] == "n01443537" and wnids[999] == "n15075141"


def test_mapping_needs_every_name_known_and_distinct_rows():
    known = {"n01440764": 0, "tench": 0, "goldfish": 1, "n01443537": 1}
    assert map_to_pretrained(["n01443537", "n01440764"], known) == {"n01443537": 1, "n01440764": 0}
    assert map_to_pretrained(["goldfish", "my-dog"], known) is None
    assert map_to_pretrained(["tench", "n01440764"], known) is None  # two names, one row
    assert map_to_pretrained([], known) is None


def test_pretrained_labels_read_id2label_synonyms_and_wnids(tiny_dit, tmp_path):
    labels = pretrained_labels(_cfg(_with_synonyms(tiny_dit, tmp_path), tmp_path), 1000)
    assert labels["white shark"] == 2 and labels["Tinca tinca"] == 0 and labels["n01443537"] == 1
    assert pretrained_labels(_cfg(tiny_dit, tmp_path), 3).get("n01440764") is None  # wnids only for 1000 classes


def test_wrong_class_count_is_refused_before_the_model_loads(tiny_dit, tmp_path, monkeypatch):
    from diffusers import DiTTransformer2DModel

    data = _class_folders(tmp_path / "data", ["cats", "dogs", "n01440764"])

    def no_load(*a, **k):
        raise AssertionError("the model must not load before the class check")

    monkeypatch.setattr(DiTTransformer2DModel, "from_pretrained", no_load)
    with pytest.raises(UserError) as err:
        get_family("dit").model.validate_config(_cfg(tiny_dit, data))
    text = str(err.value)
    assert "The dataset has 3 classes" in text and "1000 classes" in text and "--num_classes 3" in text
    assert "1 of the names are the model's own" in text and "cats" in text
    get_family("dit").model.validate_config(_cfg(tiny_dit, data, num_classes=3))  # resizing is the user's choice


@pytest.mark.parametrize("names", [["n01440764", "n01443537", "n15075141"], ["goldfish", "white shark"]])
def test_imagenet_names_keep_their_pretrained_rows_without_resize(tiny_dit, tmp_path, names):
    from dit_lora.data.sources import load_samples
    from dit_lora.families.dit.classes import read_classes

    model = _with_synonyms(tiny_dit, tmp_path)
    data = _class_folders(tmp_path / "data", names)
    cfg = _cfg(model, data)
    family = get_family("dit")
    family.model.validate_config(cfg)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    samples = load_samples(train_data_dir=cfg.data.train_data_dir, labels_from_folders=True)
    family.setup.inspect_samples(comps, cfg, samples)
    known = pretrained_labels(cfg, 1000)
    assert comps.state.label2id == {n: known[n] for n in names}
    assert int(comps.model.config.num_embeds_ada_norm) == 1000 and comps.state.null_class == 1000
    out = tmp_path / "adapter"
    out.mkdir()
    family.adapter.save_adapter(out, {}, {"r": 4, "lora_alpha": 4, "target_modules": ["to_q"]})
    family.adapter_extras.save_adapter_extras(out, comps, cfg.family_options)  # the label map the data stage decided
    info = read_classes(out)
    assert info["pretrained_rows"] is True and info["label2id"] == {n: known[n] for n in names}

    class Pipe:  # what prepare_pipeline_for_adapter touches of a DiTPipeline
        transformer = comps.model
        labels = {"tench": 0, "goldfish": 1}

    pipe = Pipe()
    family.fitting.prepare_pipeline_for_adapter(pipe, out)
    assert pipe.labels["tench"] == 0 and all(pipe.labels[n] == known[n] for n in names)


def test_pickle_only_weights_are_refused_before_loading(tiny_dit, tmp_path):
    import shutil

    model = tmp_path / "dit"
    shutil.copytree(tiny_dit, model)
    for file in (model / "transformer").glob("*.safetensors"):
        file.rename(file.with_suffix(".bin"))
    with pytest.raises(UserError, match=r"transformer/ weights only as pickle files .*safetensors files only"):
        get_family("dit").model.validate_config(_cfg(model, tmp_path))


def test_folder_labels_and_classlabel_column(shape_classes, tmp_path):
    from dit_lora.data.sources import load_samples

    samples = load_samples(train_data_dir=shape_classes, labels_from_folders=True)
    assert {s.caption for s in samples} == {"circle", "square", "triangle"}
    assert all(s.key.split("/")[0] == s.caption for s in samples)
    # Without the flag the same folder has no captions (unchanged behaviour for captioned families).
    with pytest.raises(UserError, match="no caption"):
        load_samples(train_data_dir=shape_classes)
    # Images outside a class folder are named.
    loose = tmp_path / "loose"
    (loose / "circle").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(loose / "circle" / "a.png")
    Image.new("RGB", (8, 8)).save(loose / "stray.png")
    with pytest.raises(UserError, match="stray.png"):
        load_samples(train_data_dir=loose, labels_from_folders=True)
    # A `datasets` ClassLabel column maps ints to names.
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {"image": [str(loose / "circle" / "a.png")] * 2, "label": [1, 0]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])}),
    )
    (tmp_path / "dsdir").mkdir()
    ds.to_parquet(str(tmp_path / "dsdir" / "train.parquet"))  # parquet keeps the ClassLabel feature
    rows = load_samples(dataset_name=str(tmp_path / "dsdir"), caption_column="label")
    assert [r.caption for r in rows] == ["dog", "cat"]
