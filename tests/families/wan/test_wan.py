"""families/wan/__init__.py: one package, two names (text-to-video ``wan`` and image-to-video ``wan_i2v``), its
registry entry (options per name, catalogue, demo configs, recipe script) and the lazy factory."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from helpers import ROOT

from dit_lora.catalogue.files import catalogue_of
from dit_lora.config import parse_config
from dit_lora.contract.spec import FamilySpec
from dit_lora.families import wan
from dit_lora.families.wan.i2v import WanI2VModel
from dit_lora.families.wan.model import WanModel
from dit_lora.families.wan.options import DEMO_VARIANTS, WanI2VOptions, WanOptions
from dit_lora.registry import BUILT_IN, entry_for, get_family, recipe_script


def test_make_picks_the_family_by_name():
    t2v, i2v = wan.ENTRY.build("wan"), wan.ENTRY.build("wan_i2v")
    assert type(t2v.model) is WanModel and (t2v.name, t2v.video_frames.task, t2v.video_frames.kinds) == (
        "wan", "t2v", ("t2v", "ti2v"))
    assert type(i2v.model) is WanI2VModel and (i2v.name, i2v.video_frames.task, i2v.video_frames.kinds) == (
        "wan_i2v", "i2v", ("i2v", "ti2v"))
    assert t2v.info.pipeline_class_name == "WanPipeline" and i2v.info.pipeline_class_name == "WanImageToVideoPipeline"


def test_registry_builds_both_names_through_the_entry():
    assert "wan" in BUILT_IN
    assert entry_for("wan") is entry_for("wan_i2v") is wan.ENTRY
    t2v, i2v = get_family("wan"), get_family("wan_i2v")
    assert type(t2v) is type(i2v) is FamilySpec and (t2v.name, i2v.name) == ("wan", "wan_i2v")
    assert type(t2v.model) is WanModel and type(i2v.model) is WanI2VModel
    assert wan.ENTRY.default == "wan"
    with pytest.raises(KeyError):
        wan.ENTRY.build("wan_vace")


def test_entry_gives_each_name_its_own_options():
    entry = wan.ENTRY
    assert entry.names == ("wan", "wan_i2v")
    t2v, i2v = (entry.options_for(name) for name in entry.names)
    assert (t2v, i2v) == (WanOptions, WanI2VOptions)
    assert dataclasses.is_dataclass(t2v) and issubclass(i2v, t2v)
    only_i2v = {f.name for f in dataclasses.fields(i2v)} - {f.name for f in dataclasses.fields(t2v)}
    assert only_i2v == {"validation_image"}
    with pytest.raises(TypeError):
        entry.options["wan"] = "x"  # the mapping is read-only


def test_entry_catalogue_covers_both_names():
    entries = catalogue_of(wan.ENTRY.catalogue).entries
    assert {c.family for c in entries} == set(wan.ENTRY.names)
    assert all(c.hub_id.startswith("Wan-AI/") and c.hub_id.endswith("-Diffusers") for c in entries)


def test_recipe_script_exists_and_trains_the_default_name():
    entry = wan.ENTRY
    assert entry.recipe_script == "recipes/wan_lora.py" == recipe_script("wan") == recipe_script("wan_i2v")
    text = (ROOT / entry.recipe_script).read_text()
    assert 'main("wan")' in text
    compile(text, entry.recipe_script, "exec")


@pytest.mark.parametrize("config", wan.ENTRY.demo_configs)
def test_each_demo_config_parses_for_its_family(config):
    """Each demo config is a file, names one of the entry's families and a tiny variant of that task, and parses
    (every key is an option of that family)."""
    path = ROOT / "recipes" / "configs" / config
    raw = yaml.safe_load(path.read_text())
    assert raw["family"] in wan.ENTRY.names and raw["demo"] is True
    assert raw["demo_wan_variant"] in DEMO_VARIANTS
    assert ("i2v" in raw["demo_wan_variant"]) == (raw["family"] == "wan_i2v")
    cfg = parse_config(["--config", str(path)])
    assert cfg.model.family == raw["family"] and cfg.family_options.demo_wan_variant == raw["demo_wan_variant"]
    assert cfg.model.demo and (cfg.video.max_num_frames, cfg.video.height, cfg.video.width) == (9, 64, 64)


def test_demo_configs_cover_both_tasks():
    families = {yaml.safe_load((ROOT / "recipes" / "configs" / c).read_text())["family"]
                for c in wan.ENTRY.demo_configs}
    assert families == {"wan", "wan_i2v"}
