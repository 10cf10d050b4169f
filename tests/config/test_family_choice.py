"""config/family_choice.py: the family a run is for, read before its options: --family (an alias read as its family),
else the --config YAML's ``family:``, else none (the caller infers it)."""

from __future__ import annotations

import pytest

from dit_lora.config.family_choice import family_of, named_family
from dit_lora.core.errors import UserError


def test_the_flag_wins_over_the_files_family_and_an_alias_is_read_as_its_family(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("family: sana\nrank: 4\n")
    assert named_family(["--family", "z-image", "--config", str(config)]) == "zimage"
    family, chosen_by, path, data = family_of(["--config", str(config), "--rank", "8"])
    assert (family, chosen_by, path, data) == ("sana", f"`family:` in {config}", str(config), {"family": "sana",
                                                                                                 "rank": 4})
    assert family_of(["--family", "dit"])[:2] == ("dit", "--family")


def test_neither_names_no_family_and_an_unreadable_file_is_left_to_the_parse(tmp_path):
    assert named_family(["--rank", "4"]) is None
    config = tmp_path / "run.yaml"
    config.write_text("rank: 4\n")
    assert family_of(["--config", str(config)]) == (None, "", str(config), {"rank": 4})
    config.write_text("family: [unclosed\n")
    assert family_of(["--config", str(config)]) == (None, "", str(config), None)
    assert family_of(["--family"]) == (None, "--family", None, None)  # the full parser says the value is missing


def test_an_unknown_family_is_refused_naming_the_flag():
    with pytest.raises(UserError, match=r"--family is `sdxl`, which is not one of "):
        named_family(["--family", "sdxl"])
