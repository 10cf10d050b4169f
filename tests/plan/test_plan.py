"""plan/__init__.py: ``make_plan`` plans a resolved config from the model's own config files (no weights)."""

import pytest

from dit_lora.catalogue import by_hub_id
from dit_lora.catalogue import defaults
from dit_lora.config import TrainConfig
from dit_lora.registry import get_family
from dit_lora.plan import Plan, make_plan

HUB_ID = "facebook/DiT-XL-2-256"


@pytest.fixture
def narrow_dit(monkeypatch):
    """DiT-XL-2-256's published configs, two narrow blocks deep, read as ``make_plan`` reads a model folder."""
    configs = by_hub_id(HUB_ID).configs
    asked = []

    def reader(cfg):
        asked.append(cfg.pretrained_model_name_or_path)

        def read(subfolder, filename):
            found = configs.get(f"{subfolder}/{filename}")
            if found is not None and subfolder == "transformer":
                found = {**found, "num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16}
            return found
        return read

    monkeypatch.setattr(defaults, "config_reader", reader)
    return asked


def test_make_plan_reads_the_models_configs_and_names_its_catalogue_entry(narrow_dit):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=2)
    plan = make_plan(cfg, get_family("dit"), device="cuda", num_processes=2, entry=by_hub_id(HUB_ID),
                     both_settings=False)
    assert narrow_dit == [HUB_ID]
    assert isinstance(plan, Plan) and plan.catalogue_entry == HUB_ID and plan.family == "dit"
    assert plan.num_processes == 2 and plan.depth == 2 and plan.train_batch_size == 2
    assert [step.checkpointing for step in plan.steps] == [False]  # one setting traced
    assert plan.peak_memory_bytes > sum(plan.weights.values()) > 0


def test_without_an_entry_the_plan_is_uncatalogued_and_traces_both_settings(narrow_dit):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    plan = make_plan(cfg, get_family("dit"), device="cuda")
    assert plan.catalogue_entry is None
    assert sorted(step.checkpointing for step in plan.steps) == [False, True]
