"""The held-out validation loss: the family's own training loss on samples never trained on, at fixed noise.

The samples are ``run.data.held_out`` (:mod:`dit_lora.data.held_out`: ``--validation_split`` or
``--validation_data_dir``). :func:`record` evaluates them before the first update of a fresh run (the baseline),
every ``--validation_steps`` updates (the schedule of the validation samples, with or without a
``--validation_prompt``) and after the last update, outside :func:`~.loop.train_step`: the training step keeps its
no-host-sync rule, and only the evaluation reads its result on the host, once.

What makes the figure comparable across steps and runs (:func:`evaluate`):

* every held-out sample is evaluated alone (a batch of one, never flipped, its caption never dropped), through the
  family's ``spec.loss.prepare_batch`` and ``compute_loss``, the same function the step runs;
* the noise and timestep (and any other draw the family's loss makes: DiT's class dropout, TI2V's image mode) come
  from a generator on the device seeded by (``--seed``, the sample's key) alone (:func:`~dit_lora.data.held_out
  .sample_seed`): the same draw for the same sample in every evaluation of every run, whatever its position or the
  number of processes. The draws follow the family's own timestep density, so the loss is the training objective's,
  measured on the same points each time;
* each held-out sample has a fixed step number (its position + 1) in ``batch["step"]``: a family that chooses per
  step (Wan 2.2 A14B's ``--wan_expert both``: high-noise expert on odd steps) evaluates each sample with the same
  choice every time. The samples of each parity are evaluated together (one expert switch per evaluation);
* the model runs in eval mode (LoRA dropout off) under ``torch.no_grad``, the run's autocast and without compiled
  regions, inside ``torch.random.fork_rng`` (host and device): the training's random streams (its generator, the
  global ones) are untouched, so a run trains the same weights, bit for bit, with or without the evaluation;
* several processes: each takes every N-th sample of each parity group (groups padded with a repeated sample whose
  loss is not counted, so every rank runs the same number of forwards: an FSDP2 forward is collective, and its
  gathered weights are freed after the last one); each rank
  writes its samples' losses into a vector of all of them, one sum-reduction gathers it, and the host averages it
  in sample order: the same number on one process or several.

The mean is over samples (each sample's own loss, e.g. a video LLM's mean over its answer tokens). The history
(``RunState.validation_losses``, ``[step, loss]``) is in every checkpoint, so a resumed run's summary and curve hold
every evaluation.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

import torch

from dit_lora.data.held_out import sample_seed
from dit_lora.output.report import finite_or_none
from dit_lora.training.run_parts import Run

#: the tracker's (tensorboard, wandb) name of the figure, beside the training ``loss``
TRACKER_KEY = "validation_loss"


def enabled(run: Run) -> bool:
    """Whether the run has held-out samples to evaluate."""
    return run.data is not None and run.data.held_out is not None


def due(run: Run, step: int) -> bool:
    """Whether the validation loss is computed after update ``step`` (0: before the first)."""
    if not enabled(run) or any(int(s) == step for s, _ in run.state.validation_losses):
        return False  # a resumed run already holds its checkpoint step's figure
    return step == 0 or step % run.cfg.validation.validation_steps == 0 or step == run.schedule.max_steps


def evaluation_order(count: int, world: int, rank: int) -> list[tuple[int, bool]]:
    """``rank``'s share of ``count`` held-out samples as (position, counted) pairs, the same length on every rank.

    Positions are grouped by the parity of their step number (position + 1), odd first; each group is padded to a
    multiple of ``world`` with its first position (not counted) and rank ``r`` takes every ``world``-th from ``r``,
    so at every forward all ranks evaluate samples of the same parity.
    """
    order: list[tuple[int, bool]] = []
    for parity in (0, 1):
        group = list(range(parity, count, 2))
        if not group:
            continue
        padded = [(p, True) for p in group] + [(group[0], False)] * (-len(group) % world)
        order += padded[rank::world]
    return order


def evaluate(run: Run) -> float:
    """The mean loss of the held-out samples at their fixed draws (every rank calls it; every rank gets the mean)."""
    held, accelerator, cfg = run.data.held_out, run.accelerator, run.cfg
    device = accelerator.device
    model = run.engine.unwrap(run.model)
    losses = torch.zeros(len(held), dtype=torch.float32, device=device)
    model.eval()
    try:
        with _isolated_rng(device), torch.no_grad(), accelerator.autocast(), run.features.outside_step():
            for position, counted in evaluation_order(len(held), accelerator.num_processes, accelerator.process_index):
                batch = held.collate([held.dataset[(position, False)]])
                batch = run.spec.loss.prepare_batch(run.comps, batch, device, held.cached)
                batch["step"] = position + 1
                generator = torch.Generator(device=device).manual_seed(
                    sample_seed(cfg.training.seed, held.samples[position].key)
                )
                loss = run.spec.loss.compute_loss(run.comps, model, batch, generator, cfg)
                if counted:
                    losses[position] = loss.detach().float()
    finally:
        model.train()
        run.engine.after_evaluation(model)  # FSDP2: the gathered weights freed
    if accelerator.num_processes > 1:  # each entry is one rank's; the others add zeros: exact
        losses = accelerator.reduce(losses, reduction="sum")
    values = losses.tolist()  # the evaluation's one host read, outside the training step
    return math.fsum(values) / len(values)


@contextlib.contextmanager
def _isolated_rng(device: torch.device) -> Iterator[None]:
    """The global random state (host, and the accelerator's) as it was before, whatever the evaluation draws."""
    if device.type == "cpu":
        with torch.random.fork_rng(devices=[]):
            yield
        return
    index = device.index if device.index is not None else torch.get_device_module(device.type).current_device()
    with torch.random.fork_rng(devices=[index], device_type=device.type):
        yield


def record(run: Run, progress: Any = None) -> float:
    """Evaluate (:func:`evaluate`), keep ``[step, loss]`` in the run's history, and log it: a line, the trackers, and
    the progress bar's postfix (``progress``: the loop's :class:`~dit_lora.core.progress.Progress`, or None). Returns
    the seconds it took (the loop leaves them out of the step time)."""
    started = time.perf_counter()
    loss = evaluate(run)
    seconds = time.perf_counter() - started
    state = run.state
    state.validation_losses.append([state.global_step, loss])
    best = best_evaluation(state.validation_losses)
    shown = f"{loss:.6g}" if math.isfinite(loss) else "non-finite"
    run.log(
        f"validation loss at step {state.global_step}: {shown} (mean of {len(run.data.held_out)} held-out "
        f"sample(s) at fixed noise and timesteps, {seconds:.2f} s"
        + (f"; best {best[1]:.6g} at step {best[0]}" if best is not None and best[0] != state.global_step else "")
        + ")"
    )
    if math.isfinite(loss):
        run.accelerator.log({TRACKER_KEY: loss}, step=state.global_step)
        if progress is not None:
            progress.set_postfix({**progress.postfix, "val_loss": f"{loss:.4f}"})
    return seconds


def best_evaluation(history: list[list[float]]) -> tuple[int, float] | None:
    """The (step, loss) of the lowest finite validation loss (the earliest on a tie), or None."""
    finite = [(int(s), float(loss)) for s, loss in history if loss is not None and math.isfinite(loss)]
    return min(finite, key=lambda e: (e[1], e[0])) if finite else None


def summary(run: Run) -> dict[str, Any] | None:
    """``train_summary.json``'s ``validation_loss``: the held-out source and count, every evaluation and the best
    one; None for a run without held-out samples."""
    if not enabled(run):
        return None
    cfg, history = run.cfg, run.state.validation_losses
    best = best_evaluation(history)
    return {
        # the card shows `source`; a folder's path (the user's own folders) only the summary
        "source": (
            f"--validation_split {cfg.data.validation_split:g}"
            if cfg.data.validation_split is not None
            else "--validation_data_dir"
        ),
        "folder": cfg.data.validation_data_dir,
        "samples": len(run.data.held_out),
        "keys": [s.key for s in run.data.held_out.samples],
        "every_steps": cfg.validation.validation_steps,
        "evaluations": [[int(s), finite_or_none(loss)] for s, loss in history],
        "best_step": best[0] if best is not None else None,
        "best_loss": best[1] if best is not None else None,
        "final_loss": finite_or_none(history[-1][1]) if history else None,
    }


__all__ = ["TRACKER_KEY", "best_evaluation", "due", "enabled", "evaluate", "evaluation_order", "record", "summary"]
