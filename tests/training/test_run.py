"""Setup stages' own checks (the stages themselves are exercised by every recipe run in tests/e2e)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.errors import UserError
from dit_lora.training.run import check_same_trainables


def test_a_checkpoint_of_other_trainables_is_refused_in_one_paragraph():
    """Resuming with another --rank (or after a version that chooses another default rank) names the tensor and
    the fix instead of failing in copy_ with a shape error."""
    params = {"blocks.0.to_q.lora_A.default.weight": torch.nn.Parameter(torch.zeros(4, 32))}
    check_same_trainables({"blocks.0.to_q.lora_A.default.weight": torch.zeros(4, 32)}, params, "ckpt-4")
    with pytest.raises(UserError, match=r"ckpt-4 .* builds blocks.0.to_q.lora_A.default.weight as \(4, 32\), the "
                                        r"checkpoint holds \(16, 32\).*--rank"):
        check_same_trainables({"blocks.0.to_q.lora_A.default.weight": torch.zeros(16, 32)}, params, "ckpt-4")
    with pytest.raises(UserError, match="this run has no blocks.1.to_k.lora_A.default.weight"):
        check_same_trainables({"blocks.1.to_k.lora_A.default.weight": torch.zeros(4, 32)}, params, "ckpt-4")
