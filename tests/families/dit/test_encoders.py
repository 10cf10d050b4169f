"""families/dit/encoders.py: class names to the run's class ids, the cache key holding the class list, and the
label map the setup component builds from the screened samples."""

from __future__ import annotations

import pytest
import torch
from dit_configs import dit_cfg

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.dit.state import DiTRun


def test_class_names_become_the_runs_ids_once_the_label_map_exists():
    from dit_lora.registry import get_family

    encoders = get_family("dit").encoders
    comps = Components(model=None)
    assert encoders.encode_prompts(comps, ["circle"], with_negative=True) == {}  # no label map yet
    comps.state = DiTRun(label2id={"circle": 0, "square": 1}, null_class=2, classes=["circle", "square"])
    out = encoders.encode_prompts(comps, ["square", "circle"], with_negative=True)
    assert out["class_labels"].tolist() == [1, 0] and out["negative_class_labels"].tolist() == [2, 2]
    with pytest.raises(UserError, match="Unknown class name"):
        encoders.encode_prompts(comps, ["hexagon"])
    cfg = dit_cfg("facebook/DiT-XL-2-256", "unused", "unused")
    assert encoders.cache_identity(cfg, comps)["classes"] == ["circle", "square"]
    assert encoders.cache_identity(cfg)["classes"] is None  # check-data: no model, no label map


def test_num_classes_smaller_than_dataset_is_refused(tiny_dit, shape_classes, tmp_path):
    from dit_lora.data.sources import load_samples
    from dit_lora.registry import get_family

    family = get_family("dit")
    cfg = dit_cfg(tiny_dit, shape_classes, tmp_path / "o", num_classes=2)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    samples = load_samples(train_data_dir=shape_classes, labels_from_folders=True)
    with pytest.raises(UserError, match=r"--num_classes 2 is smaller than the dataset's 3 classes"):
        family.setup.inspect_samples(comps, cfg, samples)
    with pytest.raises(UserError, match=r"is not a class of the dataset"):
        family.setup.inspect_samples(comps, dit_cfg(tiny_dit, shape_classes, tmp_path / "o", num_classes=3,
                                            validation_prompt="hexagon"), samples)
