"""families/videollm/liger.py: the hidden-state loss the fused path computes equals the model's own, and without
Liger (no package, or no CUDA) a run says so once and keeps the plain path."""

from __future__ import annotations

import types

import pytest
import torch

from dit_lora.families.videollm.liger import (
    IGNORE_INDEX,
    apply_liger,
    hidden_state_loss,
    liger_unavailable_reason,
    plain_loss,
)


@pytest.fixture(scope="module")
def tiny_lm():
    """A one-layer Llama-style causal LM (the language model of LLaVA-NeXT-Video is Mistral/Llama-like)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(config).eval()


def test_the_hidden_state_loss_is_the_models_own(tiny_lm):
    ids = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :3] = IGNORE_INDEX  # the prompt is not trained on
    inputs = {"input_ids": ids}
    with torch.no_grad():
        want = plain_loss(None, tiny_lm, inputs, labels)
        got = hidden_state_loss(None, tiny_lm, inputs, labels)
        seen = []

        def linear_ce(weight, hidden, target):
            seen.append((tuple(weight.shape), tuple(hidden.shape), tuple(target.shape)))
            return torch.nn.functional.cross_entropy(hidden @ weight.T, target, ignore_index=IGNORE_INDEX)

        fused = hidden_state_loss(None, tiny_lm, inputs, labels, linear_ce=linear_ce)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(fused, want)
    assert seen == [((40, 16), (12, 16), (12,))]  # shifted by one token, never the full logits


def test_without_cuda_or_the_package_a_note_and_the_plain_path(tiny_lm):
    reason = liger_unavailable_reason(torch.device("cpu"))
    assert reason in ("Liger-Kernel is not installed (`pip install liger-kernel`)",
                      "Liger-Kernel's Triton kernels need a CUDA GPU")
    notes: list[str] = []
    spec = types.SimpleNamespace(language_model="model")
    assert apply_liger(spec, tiny_lm, notes.append) is None
    assert notes == [f"note: --use_liger_kernel: {reason}; training on the plain PyTorch path."]
