"""The held-out validation loss (dit_lora.training.validation_loss) on a stand-in run: fixed draws per sample, the
training's random streams untouched, every process's share, when it is due, the history and the summary. The
runs that train with it are tests/e2e/test_validation_loss.py (Sana), test_videollm.py, test_wan.py and
test_fsdp2.py (two processes, FSDP2 and DDP)."""

from __future__ import annotations

import contextlib
import math
from types import SimpleNamespace

import pytest
import torch

from dit_lora.data.sources import RawSample
from dit_lora.training import validation_loss
from dit_lora.core.engine import EngineChoice
from dit_lora.training.engine import make_engine
from dit_lora.training.features import Features
from dit_lora.training.run_parts import RunState
from config_stand_in import stand_in


class _Loss:
    """A family loss that draws like one: noise and a timestep from the step's generator, and something from the
    global RNG too (as LoRA dropout would in training mode)."""

    def __init__(self):
        self.seen: list[tuple[int, int, bool]] = []  # (sample's value, step, model in training mode)

    def prepare_batch(self, comps, batch, device, cached):
        return {"x": batch["x"].to(device), "sample_index": batch["sample_index"]}

    def compute_loss(self, comps, model, batch, generator, cfg):
        self.seen.append((int(batch["x"][0, 0]), batch["step"], model.training))
        noise = torch.randn(4, generator=generator)
        t = torch.rand(1, generator=generator)
        torch.rand(1)  # the global stream: the evaluation must give it back as it was
        return ((model(batch["x"].float()) - noise) ** 2).mean() * t[0]


class _Inputs:
    """Item ``position`` of the held-out set: the input of the sample named ``s<i>.png``, ``i`` its number."""

    def __init__(self, numbers: list[int]):
        self.numbers = numbers

    def __getitem__(self, item):
        position, flip = item
        assert flip is False  # never flipped
        return {"x": torch.full((4,), float(self.numbers[position])), "sample_index": position}


class _Held:
    """The held-out PreparedData's surface the evaluation reads."""

    def __init__(self, numbers: list[int]):
        self.dataset, self.cached = _Inputs(numbers), True
        self.samples = [RawSample(key=f"s{i}.png", caption="") for i in numbers]

    def __len__(self):
        return len(self.samples)

    @staticmethod
    def collate(items):
        return {"x": torch.stack([it["x"] for it in items]), "sample_index": [it["sample_index"] for it in items]}


def _engine(accelerator):
    engine = make_engine(EngineChoice("ddp", ()))
    engine.accelerator = accelerator
    return engine


def _run(n: int = 5, *, numbers=None, world: int = 1, rank: int = 0, reduce=None, seed: int = 7):
    """A stand-in run with ``n`` held-out samples (``numbers``: their names' numbers, in listing order)."""
    logged: list = []
    accelerator = SimpleNamespace(
        device=torch.device("cpu"), num_processes=world, process_index=rank, unwrap_model=lambda m: m,
        autocast=contextlib.nullcontext, reduce=reduce, log=lambda values, step: logged.append((step, values)),
    )
    torch.manual_seed(0)  # the same stand-in model in every call
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    lines: list[str] = []
    run = SimpleNamespace(
        data=SimpleNamespace(held_out=_Held(list(range(n)) if numbers is None else numbers)), accelerator=accelerator,
        model=model, spec=SimpleNamespace(loss=_Loss()), comps=None, features=Features([]), engine=_engine(accelerator),
        state=RunState(), log=lines.append,
        cfg=stand_in(seed=seed, validation_steps=3, validation_split=0.1, validation_data_dir=None),
        schedule=SimpleNamespace(max_steps=10),
    )
    return run, lines, logged


def test_the_same_sample_gets_the_same_draw_and_the_training_streams_stay_as_they_were():
    run, _, _ = _run()
    run.model.train()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = validation_loss.evaluate(run)
    assert torch.equal(torch.get_rng_state(), before)  # the global stream (LoRA dropout's) untouched
    assert run.model.training  # back in training mode
    assert run.spec.loss.seen and all(not training for _, _, training in run.spec.loss.seen)  # eval mode: no dropout
    assert validation_loss.evaluate(run) == first  # fixed noise and timesteps: the same number again
    # The draw follows the sample's name, not its position: the same samples listed in another order, the same mean
    assert validation_loss.evaluate(_run(numbers=[3, 1, 4, 0, 2])[0]) == first
    assert validation_loss.evaluate(_run(seed=8)[0]) != first  # another seed, other draws


@pytest.mark.parametrize("count", range(0, 8))
@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_sample_is_counted_once_and_ranks_run_alike(count, world):
    orders = [validation_loss.evaluation_order(count, world, rank) for rank in range(world)]
    counted = sorted(p for order in orders for p, c in order if c)
    assert counted == list(range(count))
    assert len({len(order) for order in orders}) == 1  # every rank the same number of forwards (FSDP2)
    for forwards in zip(*orders):  # at each forward, one parity of step number (position + 1) on every rank
        assert len({p % 2 for p, _ in forwards}) == 1


def test_two_ranks_shares_reduce_to_the_one_process_mean():
    single, _, _ = _run(5)
    expected = validation_loss.evaluate(single)
    shares = []
    for rank in range(2):
        run, _, _ = _run(5, world=2, rank=rank, reduce=lambda t, reduction: shares.append(t.clone()) or t)
        validation_loss.evaluate(run)
    total = shares[0] + shares[1]  # what the sum-reduction hands every rank
    assert (shares[0] != 0).sum() + (shares[1] != 0).sum() == 5  # each sample on one rank
    assert math.fsum(total.tolist()) / 5 == expected
    steps = sorted(step for _, step, _ in single.spec.loss.seen)
    assert steps == [1, 2, 3, 4, 5]  # a fixed step number per sample (a family choosing per step sees the same)


def test_due_before_the_first_update_every_validation_steps_and_at_the_end_once():
    run, _, _ = _run()
    assert [s for s in range(11) if validation_loss.due(run, s)] == [0, 3, 6, 9, 10]
    run.state.validation_losses.append([3, 0.5])  # a resumed run already holds step 3's figure
    assert not validation_loss.due(run, 3)
    run.data.held_out = None
    assert not validation_loss.due(run, 0)


def test_record_keeps_the_history_logs_it_and_the_summary_names_the_best(monkeypatch):
    run, lines, logged = _run()
    progress = SimpleNamespace(postfix={"loss": "0.1"}, set_postfix=lambda v: setattr(progress, "postfix", v))
    figures = iter([0.5, 0.25, 0.4, float("nan")])
    monkeypatch.setattr(validation_loss, "evaluate", lambda run: next(figures))
    for step in (0, 3, 6, 9):
        run.state.global_step = step
        validation_loss.record(run, progress)
    assert run.state.validation_losses[:3] == [[0, 0.5], [3, 0.25], [6, 0.4]]
    assert "validation loss at step 6: 0.4 (mean of 5 held-out sample(s)" in lines[2]
    assert "best 0.25 at step 3" in lines[2] and "non-finite" in lines[3]
    assert logged == [(0, {"validation_loss": 0.5}), (3, {"validation_loss": 0.25}), (6, {"validation_loss": 0.4})]
    assert progress.postfix == {"loss": "0.1", "val_loss": "0.4000"}
    summary = validation_loss.summary(run)
    assert summary["evaluations"] == [[0, 0.5], [3, 0.25], [6, 0.4], [9, None]]
    assert (summary["best_step"], summary["best_loss"], summary["final_loss"]) == (3, 0.25, None)
    assert summary["source"] == "--validation_split 0.1" and summary["samples"] == 5
    assert validation_loss.best_evaluation([[1, 0.2], [2, 0.2]]) == (1, 0.2)  # the earliest on a tie
