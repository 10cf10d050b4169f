"""FLUX.1's model checks: [schnell] (no guidance embedding) refused in one paragraph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_a_folder_without_the_guidance_embedding_is_refused(tiny_flux, tmp_path):
    """A FLUX.1 whose transformer has no guidance embedding ([schnell], its derivatives) stops in one paragraph
    naming the model to train instead; the catalogue's [schnell] entry carries the same refusal."""
    import shutil

    from dit_lora.catalogue import by_hub_id, refused_match
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_spec

    folder = tmp_path / "schnell"
    shutil.copytree(tiny_flux, folder)
    config = folder / "transformer" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "guidance_embeds": False}))
    cfg = TrainConfig.for_family("flux", pretrained_model_name_or_path=str(folder), train_data_dir=str(tmp_path))
    with pytest.raises(UserError) as refused:
        get_spec("flux").model.validate_config(cfg)
    text = str(refused.value)
    assert "no guidance embedding" in text and "black-forest-labs/FLUX.1-dev" in text and "\n" not in text
    get_spec("flux").model.validate_config(replace_model(cfg, tiny_flux))  # the dev demo passes
    assert by_hub_id("black-forest-labs/FLUX.1-schnell") is None  # recognised, never given defaults
    entry = refused_match(lambda sub, name: None, "black-forest-labs/FLUX.1-schnell")
    assert entry is not None and entry.refusal and "FLUX.1-dev" in entry.refusal


def replace_model(cfg, path: Path):
    """``cfg`` trained on ``path``."""
    from dataclasses import replace

    return replace(cfg, model=replace(cfg.model, pretrained_model_name_or_path=str(path)))


def test_the_model_builds_its_components_with_a_new_flux_run():
    """What was loaded (or planned on the meta device), with a new FluxRun recording the checkpoint each time."""
    from types import SimpleNamespace

    from dit_lora.families.flux.model import PARTS, FluxModel
    from dit_lora.families.flux.spec import INFO
    from dit_lora.families.flux.state import FluxRun
    from dit_lora.kit.loader import LoadedParts

    transformer = SimpleNamespace(config=SimpleNamespace(guidance_embeds=True))
    loaded = LoadedParts(transformers={"transformer": transformer}, vae=None, scheduler_config={"shift": 3.0})
    model = FluxModel(INFO, PARTS)
    comps = model.build_components(None, loaded, None)
    assert type(comps.state) is FluxRun and comps.state.guidance_embeds and comps.model is transformer
    assert comps.state.scheduler_config == {"shift": 3.0}
    assert model.build_components(None, loaded, None).state is not comps.state  # a new one each time
