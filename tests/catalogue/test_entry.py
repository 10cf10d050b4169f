"""catalogue/entry.py: a checkpoint is matched by the content of its configs, never by its name."""

from __future__ import annotations

import pytest

from dit_lora.catalogue.entry import Checkpoint, lookup


def checkpoint(**changes) -> Checkpoint:
    fields = dict(hub_id="org/model", family="sana", title="Model", stored_dtype="bf16", text_length=300,
                  defaults={"rank": 4}, sources={"rank": "its README"},
                  signature={"transformer/config.json": {"num_layers": 2, "sizes": [1, 2], "scale": 1,
                                                         "text_config.vocab_size": 7}},
                  configs={}, depth={"transformer/config.json": {"num_layers": 28}})
    fields.update(changes)
    return Checkpoint(**fields)


def reader(files: dict):
    return lambda sub, name: files.get(f"{sub}/{name}" if sub else name)


def test_lookup_reads_dotted_keys_and_the_text_config_fallback():
    config = {"a": {"b": 3}, "text_config": {"hidden_size": 64}, "top": 1}
    assert lookup(config, "a.b") == 3 and lookup(config, "top") == 1
    assert lookup(config, "hidden_size") == 64  # transformers 5 keeps a VLM's sizes under text_config
    assert lookup(config, "a.c") is None and lookup(config, "a.b.c") is None and lookup({}, "x") is None


def test_matches_compares_lists_and_whole_floats_alike():
    entry = checkpoint()
    found = {"num_layers": 2, "sizes": (1, 2), "scale": 1.0, "text_config": {"vocab_size": 7}, "other": "x"}
    assert entry.matches(reader({"transformer/config.json": found}))
    assert not entry.matches(reader({"transformer/config.json": {**found, "scale": 1.5}}))
    assert not entry.matches(reader({"transformer/config.json": {**found, "sizes": [2, 1]}}))
    assert not entry.matches(reader({"transformer/config.json": {**found, "text_config": {}}}))
    assert not entry.matches(reader({}))  # a missing file never matches
    top_level = checkpoint(signature={"config.json": {"model_type": "x"}})  # a file at the folder's root
    assert top_level.matches(reader({"config.json": {"model_type": "x"}}))


def test_depth_differences_name_what_the_copy_changed():
    entry = checkpoint()
    assert entry.depth_differences(reader({"transformer/config.json": {"num_layers": 28}})) == []
    assert entry.depth_differences(reader({"transformer/config.json": {"num_layers": 2}})) == [
        "num_layers 2 (published: 28)"]
    assert entry.depth_differences(reader({})) == ["num_layers None (published: 28)"]


def test_trained_text():
    assert checkpoint(trained={"resolution": 1024}).trained_text() == "1024 px"
    assert checkpoint(trained={"frames": 49, "height": 480, "width": 720, "fps": 8}).trained_text() == \
        "49 x 480 x 720 at 8 fps"
    assert checkpoint().trained_text() == "-"


def test_also_families_serve_one_entry_to_several_families():
    entry = checkpoint(family="wan", also_families=("wan_i2v",))
    assert entry.families == ("wan", "wan_i2v") and checkpoint().families == ("sana",)
    for bad in (("wan",), ("wan_i2v", "wan_i2v")):  # the family itself, or a repeat, is a mistake in the data file
        with pytest.raises(ValueError, match="repeats a family"):
            checkpoint(family="wan", also_families=bad)


def test_wan_ti2v_5b_is_one_entry_for_wan_and_wan_i2v(tmp_path):
    """TI2V-5B serves --family wan and wan_i2v from one entry: listed once, found once by Hub id, matched by content
    for either family, and a wan_i2v run on its configs takes its defaults (not the family's generic ones)."""
    import json

    from dit_lora.catalogue import by_hub_id, entries, match
    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.config.parser import parse_config
    from dit_lora.setup.family_inference import family_for_model
    from dit_lora.registry import get_family

    hub_id = "Wan-AI/Wan2.2-TI2V-5B-Diffusers"
    ti2v = by_hub_id(hub_id)
    assert ti2v.families == ("wan", "wan_i2v")
    assert [e.hub_id for e in entries()].count(hub_id) == 1
    assert ti2v in entries("wan") and ti2v in entries("wan_i2v")
    # text- and image-to-video too: SANA-Video's and LTX-2's checkpoints
    both = [by_hub_id(i) for i in ("Efficient-Large-Model/SANA-Video_2B_480p_diffusers", "Lightricks/LTX-2",
                                   "diffusers/LTX-2.3-Diffusers")]
    assert all(e.families == (e.family,) for e in entries() if e not in (ti2v, *both))  # those serving several
    assert both[0].families == ("sanavideo", "sanavideo_i2v")
    assert all(e.families == ("ltx2", "ltx2_i2v", "ltx2_ic") for e in both[1:])  # in-context LoRAs too
    for family in ti2v.families:
        assert match(family, reader(ti2v.configs)) is ti2v
    # the 2.1 T2V 1.3B is text-to-video only: wan_i2v does not get it
    t2v = by_hub_id("Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    assert match("wan", reader(t2v.configs)) is t2v and match("wan_i2v", reader(t2v.configs)) is None
    folder = tmp_path / "ti2v"
    for file, config in ti2v.configs.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(json.dumps(config))
    cfg = parse_config(["--pretrained_model_name_or_path", str(folder), "--train_data_dir", str(folder),
                        "--family", "wan_i2v"])
    chosen = choose_defaults(cfg, get_family("wan_i2v"))
    cfg = chosen.config
    assert chosen.entry is ti2v and chosen.summary()["catalogue_entry"] == hub_id
    assert (cfg.lora.rank, cfg.lora.lora_alpha, cfg.training.learning_rate) == (32, 32, 1e-4)
    assert f"has the published config of {hub_id}" in "\n".join(chosen.lines())
    assert family_for_model(parse_config(["--pretrained_model_name_or_path", hub_id, "--train_data_dir", str(folder),
                                          "--family", "wan"]).model) == "wan"
