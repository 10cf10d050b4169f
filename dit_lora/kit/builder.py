"""The diffusers family kit's spec builder: :func:`diffusion_spec` fills every default component of a diffusion
family's :class:`~dit_lora.contract.spec.FamilySpec` and wires the components that need each other, so a family's
``spec.py`` states only what differs.

Defaults: the standard image data (:class:`~.components.DiffusionData`), metadata captions
(:class:`~.components.DiffusionCaptions`), no notes, the precision of the model's ``PipelineParts`` (else the model
in the run's dtype, :class:`~.components.DiffusionPrecision`), nothing set up per run
(:class:`~.components.DiffusionSetup`), the kit's adapter on ``info.pipeline_class_name``
(:class:`~.adapter.KitAdapter`), where the family's exports can also write beside the adapter (its ComfyUI file),
those exports as its adapter extras, and, where its clip buckets' component also says the model's frame rate (a video
family's task), that component as its frame rate. Wiring: the loss takes the encoders,
the samples take the encoders, the plan takes the encoders, the loss and the image buckets, and the model. A family's
``spec.py`` imports each of its own classes and passes them here by name (ARCHITECTURE.md, "What a new family adds"),
so an editor's go-to-definition and the import graph lead from the spec to every component.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dit_lora.contract.capabilities import AdapterExtras, FrameRate
from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.kit.adapter import KitAdapter
from dit_lora.kit.components import (
    DiffusionCaptions,
    DiffusionData,
    DiffusionNotes,
    DiffusionPlan,
    DiffusionPrecision,
    DiffusionSetup,
)
from dit_lora.kit.demo_data import nearest_sizes
from dit_lora.modelfiles.pipeline_files import read_component_config

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, ModelOptions


def check_divisible(resolution: int, multiple: int, why: str) -> None:
    """Refuse a ``--resolution`` that is not a multiple of ``multiple`` in one paragraph: ``why`` (the family's latent
    stride and its pipeline's rule), then the nearest sizes that are."""
    if resolution % multiple:
        raise UserError(
            f"--resolution {resolution} is not divisible by {multiple}: {why}. Use {nearest_sizes(resolution, multiple)}."
        )


class AnyAspect:
    """``FamilySpec.image_buckets`` of a transformer that takes any latent grid (its patch embedding has no fixed
    positional table, or its RoPE positions follow the grid): buckets of any aspect ratio in steps of ``stride``, the
    latent stride in pixels, the VAE's downsampling x the patch size (a family whose stride depends on the model's
    configs overrides :meth:`bucket_stride`)."""

    def __init__(self, stride: int = 16) -> None:
        self.stride = stride

    def bucket_stride(self, model: ModelOptions) -> int:
        """:attr:`stride`."""
        return self.stride

    def square_only(self) -> str | None:
        """Never: the transformer takes any grid."""
        return None


class LatentGrid(AnyAspect):
    """``FamilySpec.image_buckets`` and ``FamilySpec.defaults`` of a transformer that patchifies any latent grid
    (PixArt's, DiT's, Sana's): buckets of any aspect ratio in the latent stride, the VAE's downsampling (2 to the
    number of its config's ``vae_key`` blocks, ``vae_blocks`` when unset, less one) x the patch size (the transformer
    config's ``patch_key``, ``patch`` when unset; ``default_stride`` without a model), and, for an uncatalogued model,
    the resolution it was built for (the transformer's ``sample_size`` x the VAE's downsampling), all read from the
    model's small config files (``sample_size``: the transformer class's own default, for a config that leaves it
    unset). ``square``: why a transformer that unpatchifies only squares takes squares only (None: any aspect)."""

    def __init__(
        self,
        patch_key: str = "patch_size",
        default_stride: int = 16,
        *,
        vae_key: str = "block_out_channels",
        vae_blocks: int = 4,
        patch: int = 2,
        sample_size: int | None = None,
        square: str | None = None,
    ) -> None:
        self.patch_key, self.default_stride = patch_key, default_stride
        self.vae_key, self.vae_blocks, self.patch, self.sample_size = vae_key, vae_blocks, patch, sample_size
        self.square = square

    def square_only(self) -> str | None:
        """``square``: the reason every image is cropped to the ``--resolution`` square, or None."""
        return self.square

    def sizes(self, model: ModelOptions) -> tuple[int, int, int | None]:
        """(the VAE's downsampling, the patch size, the transformer's ``sample_size``; None when unset and the class
        has no default, or when the transformer's config cannot be read) of the run's ``model``."""
        vae, transformer = (read_component_config(model, folder) or {} for folder in ("vae", "transformer"))
        factor = 2 ** (len(vae.get(self.vae_key, [0] * self.vae_blocks)) - 1)
        sample = transformer.get("sample_size", self.sample_size if transformer else None)
        return factor, int(transformer.get(self.patch_key, self.patch)), sample

    def bucket_stride(self, model: ModelOptions) -> int:
        """The VAE's downsampling x the patch size (``default_stride`` without a model)."""
        if not model.pretrained_model_name_or_path:
            return self.default_stride
        factor, patch, _ = self.sizes(model)
        return factor * patch

    def check_resolution(self, model: ModelOptions, resolution: int) -> None:
        """Refuse a ``--resolution`` the transformer of ``model`` cannot patch, in one paragraph naming the size to
        use."""
        stride = self.bucket_stride(model)
        if resolution % stride:
            raise UserError(
                f"--resolution {resolution} is not a multiple of {stride} (the VAE's downsampling x the patch "
                f"size). Use {max(stride, resolution // stride * stride)}."
            )

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """The resolution the model was built for (nothing when its configs do not say)."""
        factor, _, sample = self.sizes(model)
        if not (sample and read_component_config(model, "vae")):
            return {}
        return {"resolution": (int(sample) * factor, f"transformer sample_size {sample} x the VAE's {factor}x")}


class PatchPoints:
    """``FamilySpec.kernels``: the family's fused-kernel patch points (``points``: its ``kernels.patch_points``,
    called on use: the kernels pull in Triton's launchers)."""

    def __init__(self, points: Callable[[], Iterable[Any]]) -> None:
        self.points = points

    def kernel_patch_points(self) -> list:
        """The family's patch points."""
        return list(self.points())


def default_components(info: FamilyInfo, model: Any = None, stated: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The components a diffusion family gets unless it states its own (the precision: that of the ``parts`` its
    ``model`` was given, where it was). Two of the ``stated`` components serve a second role unless the family says
    otherwise: ``exports`` that also write beside the adapter are its adapter extras (every run writes its exported
    file too), ``video_frames`` that also say the model's frame rate (a video task) are its frame rate."""
    parts = getattr(model, "parts", None)
    exports, frames = (stated or {}).get("exports"), (stated or {}).get("video_frames")
    return {
        "data": DiffusionData(),
        "captions": DiffusionCaptions(),
        "notes": DiffusionNotes(),
        "precision": parts.precision if parts is not None else DiffusionPrecision(),
        "setup": DiffusionSetup(),
        "adapter": KitAdapter(info),
        **({"adapter_extras": exports} if isinstance(exports, AdapterExtras) else {}),
        **({"frame_rate": frames} if isinstance(frames, FrameRate) else {}),
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
    filled = {**default_components(info, model, components), **components}
    built_plan = plan(encoders, built_loss, filled.get("image_buckets")) if plan is not None else None
    if isinstance(built_plan, DiffusionPlan):
        built_plan.model = model  # the kit's plan_components builds the model's own components on the meta device
    return FamilySpec(
        name=name,
        info=info,
        model=model,
        encoders=encoders,
        loss=built_loss,
        samples=samples(encoders) if samples is not None else None,
        plan=built_plan,
        **filled,
    )
