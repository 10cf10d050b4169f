"""``--compile off|blocks|full``: torch.compile of the repeated transformer blocks, or of the whole model.

Regional compilation (what diffusers' ``compile_repeated_blocks`` does where a model declares
``_repeated_blocks``): each block instance gets ``module.compile()``; since the blocks share one class,
dynamo traces one block and reuses the graph for every instance (modules are inputs to the graph), so
compiling 28 blocks costs about what compiling one does. Which blocks: the family's
``repeated_block_classes`` where it names them, else the model's ``_repeated_blocks`` or
``_no_split_modules``; only classes with two or more instances that carry trainable weights (so a video
LLM's frozen vision tower stays eager).

What keeps the promises:

* **Exact resume.** Diffusion families compile one static graph per bucket shape (``dynamic=False``): a
  shape's graph does not depend on which shapes came before, so a resumed run computes what an
  uninterrupted one does. The video LLM (a new sequence length nearly every batch) compiles dynamic
  shapes from the first call for the same reason. Inductor's deterministic mode skips the on-device
  benchmarking that could pick different kernels in two processes, and ``fallback_random`` keeps dropout on
  torch's generator (the masks of an eager run, restored with the RNG state of a checkpoint).
* **The kernel check, the diagnosis replay and validation run eagerly** (``torch.compiler.set_stance
  ("force_eager")``: no recompile, no graph break). The check captures the fused ops' inputs with host
  code that a graph cannot hold; inside compiled blocks the fused ops run as their PyTorch references,
  which inductor fuses itself (see :meth:`~dit_lora.kernels.monitor.KernelRuntime.call`).
* **Counted, not assumed.** :class:`CompileCounters` reads dynamo's own counters (graphs compiled, graph
  breaks) around every step, on the host (no device sync), and the summary reports any graph compiled
  for a batch shape that had been seen before: a recompile after warm-up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from dit_lora.core.errors import UserError
from dit_lora.data.batches import PRIOR

#: torch.compile's backend. Tests of graph capture (breaks, recompiles) on families other than the one whose
#: generated code they check may set "aot_eager": the same dynamo capture without inductor's C++ build.
BACKEND = "inductor"


def check_compiler(mode: str, device_type: str) -> None:
    """Stop before anything loads when ``--compile`` cannot run here (one paragraph: flag, cause, fix)."""
    if mode == "off":
        return
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            raise UserError(
                f"--compile {mode} needs Triton on a CUDA device (inductor generates Triton kernels), and it is not "
                "installed or does not import. Install the `triton` wheel matching your torch "
                "(`pip install triton`), or train with --compile off."
            )
        return
    compilers = [c for c in (os.environ.get("CXX"), "g++", "c++", "clang++") if c]  # inductor honours $CXX
    if device_type == "cpu" and not any(shutil.which(cc) for cc in compilers):
        raise UserError(
            f"--compile {mode} on a CPU needs a C++ compiler (inductor builds its CPU kernels with one), and none "
            f"was found on PATH (looked for {', '.join(compilers)}). Install one (e.g. `apt install g++`), or train with "
            "--compile off."
        )
    if device_type not in ("cpu", "cuda"):
        raise UserError(
            f"--compile {mode} is supported on CPU and CUDA devices, not on {device_type!r}; train with --compile off."
        )


def block_classes(spec, model: torch.nn.Module) -> list[str]:
    """The class names whose instances are compiled regions (see the module docstring)."""
    names = list(spec.info.repeated_block_classes)
    if not names:
        names = list(getattr(model, "_repeated_blocks", None) or getattr(model, "_no_split_modules", None) or ())
    counts = Counter(type(m).__name__ for m in model.modules())
    return [n for n in names if counts[n] >= 2]


def _trains(module: torch.nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


@dataclass
class CompileCounters:
    """Graphs compiled and graph breaks, from dynamo's counters, per batch shape (host-side reads only)."""

    mode: str
    regions: int = 0
    dynamic: bool = False
    seen: set = field(default_factory=set)  # batch shapes met
    warm: set = field(default_factory=set)  # what has run compiled once (a shape, or any shape when dynamic)
    graphs_at_start: int = 0
    breaks_at_start: int = 0
    recompiles_after_warmup: int = 0
    first_graph_steps: list[int] = field(default_factory=list)  # steps that compiled a new graph
    _before: int = 0

    @staticmethod
    def _graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    @staticmethod
    def _breaks() -> int:
        from torch._dynamo.utils import counters

        return int(sum(counters["graph_break"].values()))

    def start(self) -> None:
        self.graphs_at_start, self.breaks_at_start = self._graphs(), self._breaks()

    def before_step(self) -> None:
        if self.mode != "off":
            self._before = self._graphs()

    def after_step(self, step: int, shape_key: Any, ran_compiled: bool = True) -> None:
        """Record whether this step compiled a graph; one after warm-up is a recompile.

        Warm-up is the first compiled step of each batch shape (static graphs), or the first compiled step
        at all (dynamic shapes: one graph must serve every shape).
        """
        if self.mode == "off":
            return
        warm_key = "any shape" if self.dynamic else shape_key
        if self._graphs() > self._before:
            self.first_graph_steps.append(step)
            if warm_key in self.warm:
                self.recompiles_after_warmup += 1
        self.seen.add(shape_key)
        if ran_compiled:
            self.warm.add(warm_key)

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "regions": self.regions,
            "dynamic_shapes": self.dynamic,
            "graphs": self._graphs() - self.graphs_at_start,
            "graph_breaks": self._breaks() - self.breaks_at_start,
            "batch_shapes": len(self.seen),
            "recompiles_after_warmup": self.recompiles_after_warmup,
            "steps_that_compiled": self.first_graph_steps[:20],
        }


def compile_model(model: torch.nn.Module, spec, mode: str, *, dynamic: bool, buckets: int) -> CompileCounters:
    """Compile ``model`` in place (``module.compile``) for ``--compile mode``; return the counters to keep.

    ``buckets`` (the number of data buckets) sizes dynamo's recompile limit so that one static graph per batch
    shape never falls back to eager: a bucket yields its full batch and may end an epoch on a smaller remainder,
    and each shape compiles a block twice (the first block's input needs no gradient, the others' do). Should a
    run still meet more, dynamo raises instead of running the extra shape eagerly: which shapes ran eagerly would
    depend on the order they arrived in, and a resumed run would not compute the same bits.
    """
    counters = CompileCounters(mode=mode, dynamic=dynamic)
    if mode == "off":
        return counters
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()  # graphs cached by an earlier run in this process would hide this run's compiles
    inductor_config.deterministic = True
    # Dropout draws from torch's own generator as in eager mode (inductor would seed its own Philox stream):
    # a compiled run sees the masks an eager one does, and the checkpointed RNG state restores them on resume.
    inductor_config.fallback_random = True
    limit = 2 * 2 * buckets + 8  # 2 batch sizes x 2 grad variants per bucket, and room for a mask variant
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 4 * limit)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    options = {"dynamic": dynamic, "backend": BACKEND}
    if mode == "full":
        model.compile(**options)
        counters.regions = 1
    else:
        names = block_classes(spec, model)
        blocks = [m for m in model.modules() if type(m).__name__ in names and _trains(m)]
        if not blocks:
            raise UserError(
                f"--compile blocks found no repeated transformer blocks with trainable weights in "
                f"{type(model).__name__} (looked for {names or 'the classes its _no_split_modules names'}). "
                "Use --compile full, or --compile off."
            )
        for block in blocks:
            block.compile(**options)
        counters.regions = len(blocks)
    counters.start()
    return counters


def eager(counters: CompileCounters | None):
    """Run the enclosed code without compiled regions (no recompile, no graph break): checks, replays, samples."""
    if counters is None or counters.mode == "off":
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def shape_key(batch: dict[str, Any]) -> tuple:
    """What a static graph is specialised on: the shapes and dtypes of the batch's tensors (a nested batch's too:
    prior preservation's class images run through the same graphs)."""
    own = [(k, tuple(v.shape), str(v.dtype)) for k, v in batch.items() if isinstance(v, torch.Tensor)]
    prior = batch.get(PRIOR)
    return tuple(sorted(own)) + ((PRIOR, shape_key(prior)),) if isinstance(prior, dict) else tuple(sorted(own))


__all__ = ["CompileCounters", "block_classes", "check_compiler", "compile_model", "eager", "shape_key"]
