"""training/faults.py: ``--inject_faults`` parsing and what each drill does to a batch, a loss and a backward."""

from __future__ import annotations

import math

import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.training.faults import Fault, FaultInjector, parse_faults


def test_parse_steps_ranges_ranks_and_global_kinds():
    assert parse_faults(None) == [] and parse_faults(" , ") == []
    assert parse_faults("nan_loss@3, inf_grad@5-12:rank1,broken_attention,broken_kernel:rank0") == [
        Fault("nan_loss", 3, 3), Fault("inf_grad", 5, 12, 1), Fault("broken_attention"), Fault("broken_kernel", rank=0)]


@pytest.mark.parametrize("spec, message", [
    ("nan_los@3", "is not understood"),
    ("nan_loss", "is not understood"),  # a step kind needs a step
    ("nan_loss@0", "count from 1"),
    ("spike@5-2", "END must be >= START"),
    ("nan_loss@3;inf_loss@4", "is not understood"),
])
def test_malformed_items_are_refused_naming_the_forms(spec, message):
    with pytest.raises(UserError, match=message) as err:
        parse_faults(spec)
    assert "nan_loss" in str(err.value) or "START" in str(err.value)


def test_faults_fire_on_their_steps_and_rank_only():
    fault = Fault("nan_loss", 5, 7, rank=1)
    assert [fault.fires(step, 1) for step in (4, 5, 7, 8)] == [False, True, True, False]
    assert not fault.fires(6, 0)
    assert FaultInjector.from_spec("", 0) is None
    injector = FaultInjector.from_spec("broken_attention:rank1,broken_kernel", 0)
    assert not injector.broken_attention and injector.broken_kernel


def test_loss_drills():
    injector = FaultInjector.from_spec("nan_loss@1,inf_loss@2,spike@3", 0)
    loss = torch.tensor(0.5)
    assert math.isnan(injector.loss(1, loss)) and math.isinf(injector.loss(2, loss))
    assert injector.loss(3, loss).item() == 500.0 and injector.loss(4, loss) is loss


def test_batch_drills_touch_only_the_first_sample_and_copy():
    injector = FaultInjector.from_spec("nan_batch@1,inf_batch@2", 0)
    batch = {"latents": torch.zeros(2, 4, 4), "prompt_embeds": torch.zeros(2, 3)}
    out = injector.batch(1, batch)
    assert out is not batch and torch.isnan(out["latents"][0]).sum() == 2 and torch.isfinite(out["latents"][1]).all()
    assert torch.isfinite(batch["latents"]).all()  # the caller's batch is untouched
    assert torch.isinf(injector.batch(2, batch)["latents"][0]).any()
    assert injector.batch(3, batch) is batch
    frames = injector.batch(1, {"pixel_values_videos": torch.zeros(1, 8)})  # video LLMs
    assert torch.isnan(frames["pixel_values_videos"]).sum() == 1


def test_grad_drill_is_installed_for_one_step_then_removed():
    model = torch.nn.Linear(3, 2)
    injector = FaultInjector.from_spec("nan_grad@2", 0)
    for step, expect_nan in ((1, False), (2, True), (3, False)):
        model.zero_grad()
        with injector.active(step, model):
            model(torch.ones(1, 3)).sum().backward()
        assert torch.isnan(model.weight.grad).all() == expect_nan


def test_overflow_drill_fires_only_under_autocast():
    class Attention(torch.nn.Module):
        processor = None

        def forward(self, x):
            return x * 1000.0

    model = torch.nn.Sequential(Attention())
    injector = FaultInjector.from_spec("overflow@1", 0)
    x = torch.full((2,), 100.0)
    with injector.active(1, model):
        assert torch.isfinite(model(x)).all()  # fp32: finite
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.isinf(model(x)).all()  # 1e11 rounded through fp16 overflows
    assert torch.isfinite(model(x)).all()
