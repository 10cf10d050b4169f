"""families/flux2/catalogue.py: the published FLUX.2 checkpoints agree with themselves and with FLUX.2's rules.

(tests/catalogue/test_catalogue.py checks every family's entries against the libraries; these are FLUX.2's own.)
"""

from __future__ import annotations

import pytest

from dit_lora.catalogue.files import catalogue_of

ENTRIES = catalogue_of("dit_lora.families.flux2").entries


def reader(configs):
    return lambda sub, name: configs.get(f"{sub}/{name}" if sub else name)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.hub_id)
def test_each_entry_matches_its_own_configs_and_no_other(entry):
    assert entry.family == "flux2" and entry.hub_id.startswith("black-forest-labs/FLUX.2-")
    assert entry.matches(reader(entry.configs))
    assert [e.hub_id for e in ENTRIES if e.matches(reader(entry.configs))] == [entry.hub_id]
    transformer, text = entry.configs["transformer/config.json"], entry.configs["text_encoder/config.json"]
    hidden = (text.get("text_config") or text)["hidden_size"]
    assert transformer["joint_attention_dim"] == 3 * hidden  # three stacked layers of the text encoder
    assert transformer["in_channels"] == 4 * entry.configs["vae/config.json"]["latent_channels"]  # 2x2 patches
    dev = entry.hub_id.endswith("FLUX.2-dev")
    assert transformer["guidance_embeds"] is dev
    assert entry.configs["model_index.json"]["_class_name"] == ("Flux2Pipeline" if dev else "Flux2KleinPipeline")
    assert entry.text_length == entry.defaults["max_sequence_length"] == 512 and entry.defaults["resolution"] == 1024
    distilled = not dev and entry.configs["model_index.json"]["is_distilled"]
    assert "base" not in entry.hub_id or not distilled
    assert entry.defaults["validation_inference_steps"] == (4 if distilled else 50)


def test_a_reduced_depth_copy_keeps_its_entry():
    entry = ENTRIES[0]
    configs = {k: dict(v) for k, v in entry.configs.items()}
    configs["transformer/config.json"].update(num_layers=1, num_single_layers=1)
    assert entry.matches(reader(configs))
    assert entry.depth_differences(reader(configs)) == ["num_layers 1 (published: 8)",
                                                         "num_single_layers 1 (published: 48)"]
