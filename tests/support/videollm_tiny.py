"""What the video-LLM unit tests share (tests/families/videollm/): the tiny models' module-scoped fixtures
(:func:`tiny_fixtures`, also the e2e tests' build via :func:`build_tiny`), the demo question, and the catalogue
entries' checks (:func:`each_entry`, :func:`entry_configs`, :func:`others_matching`)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

QUESTION = [{"role": "user", "content": "What colour is the square?"}, {"role": "assistant", "content": "red"}]


def build_tiny(builder: str, path: Path) -> Path:
    """The tiny model of ``builder`` ("demo_module:function" in dit_lora.families.videollm), built at ``path``."""
    module, function = builder.split(":")
    return getattr(importlib.import_module(f"dit_lora.families.videollm.{module}"), function)(path)


def tiny_fixtures(spec, builder: str, folder: str):
    """Module-scoped fixtures ``tiny`` (the folder ``builder`` writes, named ``folder``), ``model`` (``spec``'s fp32
    model of it, in eval mode) and ``processing`` (the run's processing of it)."""

    @pytest.fixture(scope="module", name="tiny")
    def tiny(tmp_path_factory) -> Path:
        return build_tiny(builder, tmp_path_factory.mktemp(folder.removeprefix("tiny-").replace("-", "")) / folder)

    @pytest.fixture(scope="module", name="model")
    def model(tiny):
        import torch

        return spec.load_model(tiny, torch.float32).eval()

    @pytest.fixture(scope="module", name="processing")
    def processing(tiny, model):
        from dit_lora.families.videollm.processing import QAProcessingLoader

        return QAProcessingLoader(spec).load_processing(str(tiny), model.config)

    return tiny, model, processing


def read_from(configs):
    """A catalogue entry's configs as a folder reader (``read(sub, name)``)."""
    return lambda sub, name: configs.get(f"{sub}/{name}" if sub else name)


def each_entry(entries):
    """Parametrize a test over catalogue ``entries``, each named by its hub id."""
    return pytest.mark.parametrize("entry", entries, ids=lambda e: e.hub_id)


def entry_configs(entry, config_class: str):
    """The entry's config.json as ``transformers.<config_class>``: (config, its vision config, its text config)."""
    import transformers

    config = getattr(transformers, config_class).from_dict(entry.configs["config.json"])
    return config, config.vision_config, config.text_config


def others_matching(entry) -> list:
    """The video-LLM catalogue's other entries that a folder of this entry's configs matches (none, where the
    entries are told apart by content)."""
    from dit_lora.families.videollm.catalogue import ENTRIES

    return [e for e in ENTRIES if e is not entry and e.matches(read_from(entry.configs))]
