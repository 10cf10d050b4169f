"""What the memory-lever benchmarks (``benchmarks/levers/*_cpu.py``) share: the timed training steps of a bare
transformer with LoRA, and starting one measured configuration in a fresh child process.

Each lever's benchmark measures one configuration per child (peak memory is a per-process figure), builds its own
model and batches, and calls :func:`train_steps` for the same loop: forward under autocast on CUDA (fp32 on a CPU,
which has no fast bf16), an MSE loss in fp32, backward, AdamW, steps after ``args.warmup`` timed in wall and CPU
seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common.cpu_harness import REPO, child_environment


@dataclass
class StepTimes:
    """Per measured step: wall and CPU seconds; the loss of every step, warm-up included."""

    times: list[float] = field(default_factory=list)
    cpu_times: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def train_steps(
    model,
    batches: Iterable[dict],
    args,
    *,
    measured_start: Callable[[], None] | None = None,
    before_step: Callable[[], None] | None = None,
    after_step: Callable[[], None] | None = None,
) -> StepTimes:
    """Train ``model``'s trainable parameters (AdamW, lr 1e-4) on ``batches``; time the steps after ``args.warmup``.

    ``args`` holds ``device`` (``cpu`` or ``cuda``), ``dtype`` (a torch dtype: the autocast dtype on CUDA) and
    ``warmup``. ``measured_start`` runs once before the first measured step (after CUDA's queue is drained and its
    peak statistics reset); ``before_step``/``after_step`` around every step, outside the timing's start and inside
    its end (a lever's own counters).
    """
    import torch

    cuda = args.device == "cuda"
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    out = StepTimes()
    for i, batch in enumerate(batches):
        if i == args.warmup:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            if measured_start is not None:
                measured_start()
        if before_step is not None:
            before_step()
        start, cpu_start = time.perf_counter(), time.process_time()
        with torch.autocast("cuda", dtype=args.dtype, enabled=cuda and args.dtype != torch.float32):
            pred = model(
                hidden_states=batch["hidden_states"],
                encoder_hidden_states=batch["encoder_hidden_states"],
                timestep=batch["timestep"],
                return_dict=False,
            )[0]
        loss = (pred.float() - batch["target"]).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            out.times.append(time.perf_counter() - start)
            out.cpu_times.append(time.process_time() - cpu_start)
            if after_step is not None:
                after_step()
        out.losses.append(loss.item())
    return out


#: the caption tokens of the Sana benchmarks' random batches (Sana's padded text length)
SANA_TEXT_TOKENS = 300


def sana_batches(args, model, steps: int, *, seed: int = 1, device=None) -> list[dict]:
    """``steps`` random batches for a Sana transformer (``args``: ``batch``, ``resolution`` in pixels at the DC-AE's
    factor 32, ``dtype``, ``device`` unless given), from ``seed``: the same in every run of a benchmark."""
    import torch

    device = args.device if device is None else device
    g = torch.Generator().manual_seed(seed)
    side = args.resolution // 32
    out = []
    for _ in range(steps):
        latents = torch.randn(args.batch, model.config.in_channels, side, side, generator=g)
        text = torch.randn(args.batch, SANA_TEXT_TOKENS, model.config.caption_channels, generator=g)
        out.append(
            {
                "hidden_states": latents.to(device, args.dtype),
                "encoder_hidden_states": text.to(device, args.dtype),
                "timestep": torch.rand(args.batch, generator=g).mul(1000).to(device),
                "target": torch.randn(latents.shape, generator=g).to(device),
            }
        )
    return out


def timed_methods(cls: type, names: Iterable[str]) -> dict[str, float]:
    """Wrap ``cls``'s methods ``names`` (each taking one argument besides ``self``) to add up the seconds spent in
    them in the returned dict's ``"seconds"`` (a lever's own calls: on a CPU its copies are synchronous, so the time
    is their cost; on CUDA, what the host spends issuing them). For a child process: the class stays wrapped."""
    spent = {"seconds": 0.0}

    def timed(method):
        def call(self, value):
            start = time.perf_counter()
            try:
                return method(self, value)
            finally:
                spent["seconds"] += time.perf_counter() - start

        return call

    for name in names:
        setattr(cls, name, timed(getattr(cls, name)))
    return spent


def run_child(script: str | Path, args, keys: Iterable[str], extra: list[str], label: str) -> dict:
    """Run ``script --child`` with ``args``' ``keys`` as flags plus ``extra`` in a fresh process; its last stdout
    line, parsed as JSON. A failed child ends the benchmark with its output's tail (``label`` names it)."""
    cmd = [sys.executable, str(Path(script).resolve()), "--child", *extra]
    for key in keys:
        cmd += [f"--{key}", str(getattr(args, key))]
    cmd += ["--checkpointing", "on" if args.checkpointing else "off"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_environment(), cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"child ({label}) failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def step_arguments(
    parser: argparse.ArgumentParser,
    *,
    layers: int | None = None,
    layers_help: str | None = None,
    resolution: int | None = None,
    batch: int = 1,
    steps: int = 3,
    warmup: int = 1,
    threads: int = 2,
) -> None:
    """The options every lever benchmark takes (``--device``, ``--batch``, ``--steps``, ``--warmup``, ``--threads``,
    ``--dtype``; ``--layers`` and ``--resolution`` when given a default), each script with its own defaults."""
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    if layers is not None:
        parser.add_argument("--layers", type=int, default=layers, help=layers_help)
    if resolution is not None:
        parser.add_argument("--resolution", type=int, default=resolution)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (CUDA default)")
