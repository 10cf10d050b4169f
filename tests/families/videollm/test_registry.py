"""The video-LLM table: every architecture resolves to its own spec, and an unknown name is an error."""

from __future__ import annotations

import pytest

from dit_lora.registry import available
from dit_lora.families.videollm import registry


@pytest.mark.parametrize("name", registry.names())
def test_every_architecture_is_a_family_with_its_own_spec(name):
    assert registry.spec_for(name).name == name
    assert name in available()


def test_an_unknown_name_is_an_error_naming_the_known_ones_not_a_silent_demo(tmp_path):
    for call in (lambda: registry.spec_for("internvl"), lambda: registry.build_demo_model("internvl", tmp_path / "m")):
        with pytest.raises(KeyError, match="internvl.*llava_next_video, qwen2_5_vl"):
            call()
    assert not (tmp_path / "m").exists()  # nothing was built in its place
