"""CogVideoX's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"THUDM/CogVideoX-5b": {"demo_cogvideox_version": "1.0-5b"}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {
    "cogvideox": {"logit_mean"},
    "cogvideox_i2v": {"logit_mean", "validation_image"},
}
