"""LiveBytes: bytes of the storages a step makes and keeps, and FLOPs, on fake tensors."""

import pytest
import torch

from dit_lora.plan.fake import LiveBytes, fake_mode, fake_module, fused_attention, module_bytes, on_meta
from dit_lora.plan.report import parse_memory


def test_live_bytes_counts_new_storages_once_and_frees_them():
    with fake_mode():
        weight = torch.empty(256, 256)  # made before the mode: a weight, never counted
        live = LiveBytes()
        with live:
            view = weight.t()  # a view of the weight: no new storage
            a = torch.empty(1024, dtype=torch.float32)  # 4 KiB
            b = a.view(32, 32)  # same storage as a
            c = torch.empty(512, dtype=torch.bfloat16)  # 1 KiB
            assert live.current == 4096 + 1024
            del a, b
            assert live.current == 1024  # a's storage died with its last view
            del c, view
    assert live.peak == 4096 + 1024
    assert live.current == 0


def test_flops_follow_torch_formulas():
    with fake_mode():
        x, w = torch.empty(8, 32), torch.empty(32, 16)
        live = LiveBytes()
        with live:
            x @ w
    assert live.flops == 2 * 8 * 32 * 16


def test_fake_module_keeps_dtype_requires_grad_and_ties():
    model = on_meta(lambda: torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)), torch.bfloat16)
    model[1].weight = model[0].weight  # tied
    model[0].bias.requires_grad_(True)
    assert module_bytes(model) == (64 + 8 + 8) * 2
    with fake_mode() as mode:
        fake_module(model, mode)
    assert model[0].weight is model[1].weight
    assert model[0].weight.dtype == torch.bfloat16 and model[0].weight.device.type == "cpu"
    assert model[0].bias.requires_grad and not model[0].weight.requires_grad


def test_fused_attention_holds_no_attention_matrix():
    """Math attention on fake CPU tensors keeps the N x N matrix; the planned one keeps output + log-sum-exp."""
    def peak(planned: bool) -> int:
        with fake_mode():
            q = torch.empty(1, 2, 2048, 64, requires_grad=True)
            live = LiveBytes()
            with live:
                if planned:
                    with fused_attention():
                        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
                else:
                    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
                out.sum().backward()
        return live.peak

    matrix = 2 * 2048 * 2048 * 4
    assert peak(False) >= matrix
    assert peak(True) < matrix / 4


@pytest.mark.parametrize("text, expected", [("24GB", 24 * 2**30), ("24GiB", 24 * 2**30), ("80g", 80 * 2**30),
                                            ("16000MB", 16000 * 2**20), ("0.5T", 2**39), ("12", 12 * 2**30)])
def test_parse_memory(text, expected):
    assert parse_memory(text) == expected


def test_parse_memory_refuses_nonsense():
    from dit_lora.errors import UserError

    with pytest.raises(UserError, match="--gpu_memory"):
        parse_memory("a lot")


def test_advice_warns_when_the_headroom_is_within_the_plans_error():
    from dit_lora.plan.estimate import Plan, StepTrace
    from dit_lora.plan.report import advice

    plan = Plan(model="m", family="sana", catalogue_entry=None, device="cuda", num_processes=1, train_batch_size=2,
                gradient_accumulation_steps=1, depth=2, weights={"model": 6 * 2**30}, trained_component="model",
                trainable_params=1, optimizer_bytes=0, snapshot_bytes=0, ddp_bytes=0, cache_phase_bytes=None,
                encoders_in_training=False, process_bytes=0, checkpointing=False,
                steps=[StepTrace("b", False, 4 * 2**30, 1), StepTrace("b", True, 2**30, 2)])
    assert advice(plan, 16 * 2**30).startswith("fits: 10.00 GiB")
    assert advice(plan, 11 * 2**30).startswith("fits, narrowly")
    tight = advice(plan, 9 * 2**30)
    assert tight.startswith("does not fit") and "--gradient_checkpointing true" in tight
    assert "--train_batch_size 1 with --gradient_accumulation_steps 2" in advice(plan, int(8.5 * 2**30))
