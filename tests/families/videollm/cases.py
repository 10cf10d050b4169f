"""The video LLMs' answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

import torch

#: why tests/kernels/test_patch_image_families.py has no probe of this family's transformer
NO_GENERIC_KERNEL_PROBE = (
    "not written yet: no test checks which of a video LLM's modules (LLaVA's CLIP LayerNorms among them) the generic "
    "points reach"
)

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"llava-hf/LLaVA-NeXT-Video-7B-hf": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = frozenset()

#: names without a demo config of their own -> what covers them (tests/conformance): the entry's other architecture
#: without one syncs inside transformers' vision tower (tests/e2e/test_no_host_sync.py); its runs are that test's
NO_DEMO = {"qwen2_5_vl": "tests/e2e/test_videollm.py"}

#: names whose training step syncs inside transformers' own code, with the file the first sync comes from
#: (tests/conformance: trained without the audit, the sync shown to be upstream)
UPSTREAM_SYNCS = {"qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl"}
if torch.cuda.is_available():  # transformers' LlavaNextVideoModel.forward copies a Python list to the GPU each step
    UPSTREAM_SYNCS["llava_next_video"] = "llava_next_video"
