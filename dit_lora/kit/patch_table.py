"""A family's fused-kernel patch points, one call a point: :class:`PatchTable`.

The family's name (each point's name prefix) and the library version every point's code was taken from are stated
once; each point gives its name, target class, the kernels it calls (space-separated), the fingerprint of the code it
re-implements and its replacement (:class:`~dit_lora.kernels.patch_points.PatchPoint` says what each means).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from dit_lora.kernels.monitor import KernelRuntime
from dit_lora.kernels.patch_points import PatchPoint


class PatchTable:
    """The patch points of ``family`` (e.g. ``"sana"``), written for ``written_for`` (e.g. ``"diffusers 0.42.1"``)."""

    def __init__(self, family: str, written_for: str) -> None:
        self.family, self.written_for = family, written_for

    def forward(
        self,
        name: str,
        target: type,
        kernels: str,
        fingerprint: str,
        forward: Callable,
        when: Callable[[nn.Module], bool] | None = None,
    ) -> PatchPoint:
        """The point ``<family>.<name>`` replacing ``target``'s forward (where ``when`` holds)."""
        return PatchPoint(
            f"{self.family}.{name}", target, tuple(kernels.split()), fingerprint, forward=forward, when=when,
            written_for=self.written_for,
        )  # fmt: skip

    def processor(self, name: str, target: type, kernels: str, fingerprint: str, processor: Callable) -> PatchPoint:
        """The point ``<family>.<name>`` replacing the attention processor ``target``."""
        return PatchPoint(
            f"{self.family}.{name}", target, tuple(kernels.split()), fingerprint, processor=processor,
            written_for=self.written_for,
        )  # fmt: skip


class RuntimeProcessor:
    """Base of a family's attention processor on the run's kernels: the model's
    :class:`~dit_lora.kernels.monitor.KernelRuntime` (``runtime``) and the processor it replaces (``original``, which
    takes what the replacement does not implement)."""

    def __init__(self, runtime: KernelRuntime, original) -> None:
        self.runtime = runtime
        self.original = original
