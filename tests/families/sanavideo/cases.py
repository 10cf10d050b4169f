"""SANA-Video's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"Efficient-Large-Model/SANA-Video_2B_480p_diffusers": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {
    "sanavideo": {"logit_mean", "weighting_scheme", "complex_human_instruction"},
    "sanavideo_i2v": {"logit_mean", "weighting_scheme", "validation_image", "complex_human_instruction"},
}

#: the sibling name's folders a name trains too (its info.also_trains_folders_of; tests/setup/test_family_inference.py):
#: SANA-Video's one checkpoint serves both tasks
ALSO_TRAINS_FOLDERS_OF = {"sanavideo": {"SanaImageToVideoPipeline"}, "sanavideo_i2v": {"SanaVideoPipeline"}}
