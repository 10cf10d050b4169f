"""The diffusers family kit's spec builder: :func:`diffusion_spec` fills every default component of a diffusion
family's :class:`~dit_lora.contract.spec.FamilySpec` and wires the components that need each other, so a family's
``spec.py`` states only what differs.

Defaults: the standard image data (:class:`~.components.DiffusionData`), metadata captions
(:class:`~.components.DiffusionCaptions`), no notes, the model in the run's dtype
(:class:`~.components.DiffusionPrecision`), nothing set up per run (:class:`~.components.DiffusionSetup`) and the
kit's adapter on ``info.pipeline_class_name`` (:class:`~.adapter.KitAdapter`). Wiring: the loss takes the encoders,
the samples take the encoders, the plan takes the encoders, the loss and the image buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.families.diffusion.adapter import KitAdapter
from dit_lora.families.diffusion.components import (
    DiffusionCaptions,
    DiffusionData,
    DiffusionNotes,
    DiffusionPrecision,
    DiffusionSetup,
)


class PatchPoints:
    """``FamilySpec.kernels``: the family's fused-kernel patch points (``points``: its ``kernels.patch_points``,
    called on use: the kernels pull in Triton's launchers)."""

    def __init__(self, points: Callable[[], Iterable[Any]]) -> None:
        self.points = points

    def kernel_patch_points(self) -> list:
        """The family's patch points."""
        return list(self.points())


def default_components(info: FamilyInfo) -> dict[str, Any]:
    """The components a diffusion family gets unless it states its own."""
    return {
        "data": DiffusionData(),
        "captions": DiffusionCaptions(),
        "notes": DiffusionNotes(),
        "precision": DiffusionPrecision(),
        "setup": DiffusionSetup(),
        "adapter": KitAdapter(info),
    }


def diffusion_spec(
    name: str,
    info: FamilyInfo,
    *,
    model: Any,
    encoders: Any,
    loss: Callable[[Any], Any],
    samples: Callable[[Any], Any] | None = None,
    plan: Callable[[Any, Any, Any], Any] | None = None,
    **components: Any,
) -> FamilySpec:
    """A diffusion family's spec: ``loss(encoders)``, ``samples(encoders)`` and ``plan(encoders, loss,
    image_buckets)`` built here (a family whose constructors take more binds it: ``functools.partial`` or a
    lambda), every component of :func:`default_components` filled unless ``components`` states it (a family's
    component wins; None leaves it out), the rest of ``components`` as given."""
    built_loss = loss(encoders)
    filled = {**default_components(info), **components}
    return FamilySpec(
        name=name,
        info=info,
        model=model,
        encoders=encoders,
        loss=built_loss,
        samples=samples(encoders) if samples is not None else None,
        plan=plan(encoders, built_loss, filled.get("image_buckets")) if plan is not None else None,
        **filled,
    )
