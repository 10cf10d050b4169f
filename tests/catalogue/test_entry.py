"""catalogue/entry.py: a checkpoint is matched by the content of its configs, never by its name."""

from __future__ import annotations

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
