"""families/dit/catalogue.py: the two published DiT-XL/2 checkpoints, by content.

(tests/catalogue/test_catalogue.py checks every family's entries against the libraries; these are DiT's own facts.)
"""

from __future__ import annotations

from dit_lora.catalogue.files import catalogue_of

ENTRIES = catalogue_of("dit_lora.families.dit").entries


def read_from(configs):
    return lambda sub, name: configs.get(f"{sub}/{name}" if sub else name)


def test_the_256_and_512_px_entries():
    assert [e.hub_id for e in ENTRIES] == ["facebook/DiT-XL-2-256", "facebook/DiT-XL-2-512"]
    for entry, px in zip(ENTRIES, (256, 512)):
        transformer = entry.configs["transformer/config.json"]
        assert entry.family == "dit" and entry.matches(read_from(entry.configs))
        assert transformer["sample_size"] * 8 == px == entry.trained["resolution"] == entry.defaults["resolution"]
        assert transformer["num_embeds_ada_norm"] == 1000  # ImageNet classes
        assert entry.stored_dtype == "fp32" and entry.trained_text() == f"{px} px"


def test_the_sizes_tell_the_two_apart():
    small, large = ENTRIES
    assert small.matches(read_from(small.configs)) and not small.matches(read_from(large.configs))
    assert not large.matches(read_from(small.configs))
    assert not small.matches(read_from({}))  # a folder without the files matches nothing


def test_a_shallow_copy_keeps_the_entry_and_names_the_depth():
    configs = {k: dict(v) for k, v in ENTRIES[0].configs.items()}
    configs["transformer/config.json"]["num_layers"] = 2
    assert ENTRIES[0].matches(read_from(configs))
    assert ENTRIES[0].depth_differences(read_from(configs)) == ["num_layers 2 (published: 28)"]
