"""Wan 2.2 A14B's two experts: which one a step trains, the timesteps it owns, and where its weights live.

diffusers' pipelines run ``transformer`` (the high-noise expert) for timesteps ``t >= boundary_ratio *
num_train_timesteps`` and ``transformer_2`` (low noise) below (``WanPipeline.__call__``). Training follows the
same split: an expert's step draws its timesteps from its own part of the training schedule only
(:func:`expert_index_ranges`).

``--wan_expert high`` or ``low`` loads only that expert. ``both`` holds the two in :class:`WanExperts`; steps
alternate, high on odd steps and low on even ones (:func:`expert_for_step`: decided on the host from the step
number, so no step waits for the device, and a resumed run picks the same expert for the same step).

With ``--offload_inactive_expert`` (default) on an accelerator, only one expert's frozen weights are ever on the
device, from the load on (:meth:`WanExperts.place`): both experts' frozen tensors get a CPU copy once, at load
(pinned on CUDA); ``high``'s go to the device, ``low``'s stay in CPU memory. ``.to(device)`` (accelerate's
placement) moves the LoRA weights of both experts but not the parked expert's frozen tensors (:meth:`_apply`).
A switch points the idle expert's tensors back at their CPU copies (nothing to copy back: frozen weights never
change) and copies the other's in with ``non_blocking``. LoRA weights and their optimizer state stay on the
device throughout. The memory plan counts one expert (``model.plan_wan_components``).

The parking helpers (slots, host copies, dtype-following) are :mod:`dit_lora.modeling.host_parking`'s, shared with
``--blocks_to_swap``; an expert's swapped blocks are left to the block swap (their slots are skipped here), so the
two compose: the switch moves the rest of an expert, each swapped block comes and goes with its own forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from dit_lora.kit.components import DiffusionTrainables
from dit_lora.modeling.host_parking import Slot, follow_dtype, frozen_slots, host_copy, set_tensor

if TYPE_CHECKING:
    from diffusers.models.modeling_utils import ModelMixin

EXPERTS = ("high", "low")


def expert_for_step(step: int | None) -> str:
    """The expert ``--wan_expert both`` trains at 1-based update ``step`` (odd: high, even: low; None: high)."""
    return "low" if step is not None and int(step) % 2 == 0 else "high"


def expert_index_ranges(
    timesteps: torch.Tensor, boundary_ratio: float, num_train_timesteps: int
) -> dict[str, tuple[int, int]]:
    """``{expert: (first, end)}``: the half-open index ranges of the training schedule each expert owns.

    ``timesteps`` is the training table, noisiest first (index 0 is ``num_train_timesteps``); the high-noise
    expert owns the entries with ``t >= boundary_ratio * num_train_timesteps``, as the pipelines route them.
    """
    boundary = boundary_ratio * num_train_timesteps
    split = int((timesteps.double() >= boundary).sum().item())  # once at load time, on the host
    n = int(timesteps.shape[0])
    if not 0 < split < n:
        raise ValueError(f"boundary_ratio {boundary_ratio} leaves an expert without timesteps (split {split} of {n})")
    return {"high": (0, split), "low": (split, n)}


def transformer_config(model: nn.Module) -> Any:
    """The diffusers config of the run's model: its transformer's, or the high-noise expert's for :class:`WanExperts`
    (both experts share the architecture). Untyped: a diffusers config holds its keys as attributes."""
    return cast(Any, model).config


def _other(name: str) -> str:
    return "low" if name == "high" else "high"


class WanExperts(nn.Module):
    """The two A14B experts trained in one run (``--wan_expert both``): ``high`` and ``low`` submodules.

    The loop sees one module (LoRA, optimizer, checkpoints and the guard work on its parameters: names start
    with ``high.`` or ``low.``); the family's loss calls :meth:`activate` and runs the returned expert.
    """

    def __init__(self, high: nn.Module, low: nn.Module, *, offload: bool) -> None:
        super().__init__()
        self.high, self.low = high, low
        self.offload = offload
        # the experts' own fp32 modules (time embedder, scale_shift_table, norms): the precision audit reads them
        # from the top module, and would otherwise report them as bf16 weights left in fp32
        self._keep_in_fp32_modules = list(getattr(high, "_keep_in_fp32_modules", None) or ())
        # expert -> id(frozen tensor) -> (that tensor, its CPU copy). Keyed by the tensor object, not its name:
        # PEFT later moves each targeted weight under ``.base_layer`` (the same Parameter, a new name). The tensor
        # is kept in the entry so that its id cannot be reused while the entry lives.
        self._host: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}
        self._active: str | None = None
        self._device: torch.device | None = None

    @property
    def config(self):
        """The high-noise expert's config (both experts share the architecture)."""
        return self.high.config

    @property
    def dtype(self) -> torch.dtype:
        # diffusers' ModelMixin property; nn.Module's typing knows only submodules and tensors
        return cast(torch.dtype, self.high.dtype)

    def expert(self, name: str) -> nn.Module:
        """The ``high`` or ``low`` transformer."""
        if name not in EXPERTS:
            raise ValueError(f"unknown Wan expert {name!r} (expected one of {EXPERTS})")
        return self.high if name == "high" else self.low

    def _slots(self, name: str) -> Iterator[Slot]:
        """The expert's frozen tensors now (parameters without grad, and buffers) with where each is held, but
        those of its swapped blocks (``--blocks_to_swap`` moves them). Read at each use: a parameter unfrozen after
        load (a backbone group) trains, so it is never parked."""
        return frozen_slots(self.expert(name), skip_swapped=True)

    def place(self, device: torch.device | str) -> None:
        """Put the frozen weights where training starts (called once, by the loader, before LoRA is attached).

        Offloading on an accelerator: a CPU copy of every frozen tensor of both experts (page-locked on CUDA, so
        the switches' copies run asynchronously), made here, synchronously, once; ``high``'s tensors go to
        ``device``, ``low``'s stay in CPU memory. Otherwise both experts simply move to ``device``.
        """
        device = torch.device(device)
        self._device = device
        if not self.offload or device.type == "cpu":
            self.high.to(device)
            self.low.to(device)
            return
        pin = device.type == "cuda"
        self._host = {}
        for name in EXPERTS:
            kept = self._host[name] = {}
            for _, _, tensor in self._slots(name):
                kept[id(tensor)] = (tensor, host_copy(tensor, pin=pin))
            self._park(name)  # the loaded copy (CPU, or the device for a loader that put it there) is dropped
        self._bring("high")
        self._active = "high"

    def _park(self, name: str) -> None:
        """Point ``name``'s frozen tensors at their CPU copies (the device copies are freed; no copy back)."""
        for _, _, tensor in self._slots(name):
            entry = self._host[name].get(id(tensor))
            if entry is not None:
                set_tensor(tensor, entry[1])

    def _bring(self, name: str) -> None:
        """Copy ``name``'s frozen tensors onto the device (asynchronous from pinned memory)."""
        for _, _, tensor in self._slots(name):
            entry = self._host[name].get(id(tensor))
            if entry is not None:
                set_tensor(tensor, entry[1].to(self._device, non_blocking=True))

    def _parked(self) -> str | None:
        """The expert whose frozen tensors wait in CPU memory now (None: offloading is off or on the CPU)."""
        if not self._host or self._device is None or self._device.type == "cpu" or self._active is None:
            return None
        return _other(self._active)

    def activate(self, name: str) -> nn.Module:
        """Make ``name`` the expert whose frozen weights are on the device (the other's wait in CPU memory).

        Idempotent; nothing moves on a CPU run or without offloading. A model that was never :meth:`place`-d
        (built by hand, LoRA already on an accelerator) is placed at its first call, on its LoRA weights' device.
        """
        module = self.expert(name)
        if self._device is None and self.offload:
            trainable = next((p for p in self.parameters() if p.requires_grad), None)
            self.place(trainable.device if trainable is not None else torch.device("cpu"))
        if self._parked() == name:
            self._park(_other(name))  # first, so the device never holds both experts
            self._bring(name)
        self._active = name
        return module

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True):
        """``nn.Module._apply`` (under ``.to()``, ``.cuda()``, ``.float()``...: accelerate's device placement is
        ``model.to(device)``) that leaves the parked expert's frozen tensors in CPU memory.

        While ``super()._apply`` runs, each of them is a 0-element placeholder, so nothing of the parked expert is
        ever allocated on the device; its CPU copies are put back after. Everything else is handled as usual: the
        active expert, and the LoRA (trainable) parameters of both experts, which must be on the device.
        ``_apply`` also casts dtypes (``.half()``, ``.to(dtype)``): a frozen tensor whose dtype ``fn`` changed (seen on
        its result, the placeholder's included) gets its CPU copy cast too, so a switch never brings back the old
        dtype. The run itself never casts them (they are frozen and loaded in the run's dtype); only LoRA weights
        are cast, to fp32 masters, parameter by parameter. If ``fn`` moves the model to the CPU, offloading stops
        (every tensor is then in CPU memory anyway).
        """
        parked = self._parked()
        if parked is None:
            return super()._apply(fn, recurse)
        slots = {name: list(self._slots(name)) for name in EXPERTS}
        for _, _, tensor in slots[parked]:
            set_tensor(tensor, torch.empty(0, dtype=tensor.dtype))
        try:
            super()._apply(fn, recurse)
        finally:
            self._after_apply(slots, parked)
        return self

    def _after_apply(self, slots: dict[str, list[Slot]], parked: str) -> None:
        """Re-key the CPU copies (``_apply`` replaces buffers by new tensors), follow dtype casts, and point the
        parked expert's tensors back at their CPU copies."""
        target = None
        for name, entries in slots.items():
            kept = self._host[name]
            for table, key, old in entries:
                new = table[key]
                entry = kept.pop(id(old), None)
                if entry is None:
                    continue
                host = follow_dtype(entry[1], new.dtype)
                kept[id(new)] = (new, host)
                if name == parked:
                    set_tensor(new, host)
                else:
                    target = new.device  # where fn sent the active expert: the model's device from now on
        if target is not None:
            self._device = target  # the active expert went there with the rest (fn moved it)

    def residency(self) -> dict[str, str]:
        """``{expert: device type of its frozen weights}`` (tests and logs)."""
        out = {}
        for name in EXPERTS:
            first = next((t for _, _, t in self._slots(name)), None)
            out[name] = first.device.type if first is not None else "none"
        return out


class WanTrainables(DiffusionTrainables):
    """``FamilySpec.trainables``: ``--train_backbone`` as given, no further groups, and a checkpointing switch that
    reaches both A14B experts (:class:`WanExperts` has no switch of its own)."""

    def enable_gradient_checkpointing(self, model: nn.Module) -> None:
        """Each expert's own diffusers switch (one transformer, or both of :class:`WanExperts`)."""
        for module in (model.high, model.low) if isinstance(model, WanExperts) else (model,):
            cast("ModelMixin", module).enable_gradient_checkpointing()  # each expert is a diffusers transformer
