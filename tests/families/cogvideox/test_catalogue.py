"""families/cogvideox/catalogue.py: the published CogVideoX checkpoints (1.0 and 1.5, T2V and I2V), by content.

(tests/catalogue/test_catalogue.py checks every family's entries against the libraries; these are CogVideoX's own.)
"""

from __future__ import annotations

import pytest

from dit_lora.data.frames import check_num_frames
from dit_lora.catalogue.files import catalogue_of

ENTRIES = catalogue_of("dit_lora.families.cogvideox").entries


def read_from(configs):
    return lambda sub, name: configs.get(f"{sub}/{name}" if sub else name)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.hub_id)
def test_each_entry_is_consistent_with_its_kind(entry):
    transformer = entry.configs["transformer/config.json"]
    i2v = "I2V" in entry.hub_id
    assert entry.family == ("cogvideox_i2v" if i2v else "cogvideox")
    assert transformer["in_channels"] == (32 if i2v else 16)  # I2V concatenates the image latents
    assert entry.matches(read_from(entry.configs))
    assert entry.text_length == transformer["max_text_seq_length"] == 226
    frames, patch_t = entry.trained["frames"], transformer.get("patch_size_t")
    # the published frame count passes the frame rule the trainer applies (1.5 pads its latent frames)
    assert check_num_frames(frames, patch_size_t=patch_t, pad_latent_frames=True) == frames
    assert (patch_t == 2) == ("1.5" in entry.hub_id)


def test_no_two_entries_match_the_same_configs():
    for entry in ENTRIES:
        matching = [other.hub_id for other in ENTRIES if other.matches(read_from(entry.configs))]
        assert matching == [entry.hub_id]


def test_trained_text_and_depth():
    two_b = next(e for e in ENTRIES if e.hub_id == "THUDM/CogVideoX-2b")
    assert two_b.trained_text() == "49 x 480 x 720 at 8 fps"
    configs = {k: dict(v) for k, v in two_b.configs.items()}
    configs["transformer/config.json"]["num_layers"] = 2
    assert two_b.depth_differences(read_from(configs)) == ["num_layers 2 (published: 30)"]
