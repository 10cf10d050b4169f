"""Wan 2.2 A14B's two experts: which one a step trains, the timesteps it owns, and where its weights live.

diffusers' pipelines run ``transformer`` (the high-noise expert) for timesteps ``t >= boundary_ratio *
num_train_timesteps`` and ``transformer_2`` (low noise) below (``WanPipeline.__call__``). Training follows the
same split: an expert's step draws its timesteps from its own part of the training schedule only
(:func:`expert_index_ranges`).

``--wan_expert high`` or ``low`` loads only that expert. ``both`` holds the two in :class:`WanExperts`; steps
alternate, high on odd steps and low on even ones (:func:`expert_for_step`: decided on the host from the step
number, so no step waits for the device, and a resumed run picks the same expert for the same step). With
``--offload_inactive_expert`` (default) the frozen weights of the expert a step does not train wait in CPU
memory: each expert keeps a CPU copy of its frozen tensors, made once; switching drops the device copy of the
one going idle (nothing to copy back: frozen weights never change) and copies the other in with
``non_blocking``. LoRA weights and their optimizer state stay on the device throughout.
"""

from __future__ import annotations

import torch
from torch import nn

EXPERTS = ("high", "low")


def expert_for_step(step: int | None) -> str:
    """The expert ``--wan_expert both`` trains at 1-based update ``step`` (odd: high, even: low; None: high)."""
    return "low" if step is not None and int(step) % 2 == 0 else "high"


def expert_index_ranges(timesteps: torch.Tensor, boundary_ratio: float, num_train_timesteps: int
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


class WanExperts(nn.Module):
    """The two A14B experts trained in one run (``--wan_expert both``): ``high`` and ``low`` submodules.

    The loop sees one module (LoRA, optimizer, checkpoints and the guard work on its parameters: names start
    with ``high.`` or ``low.``); the family's loss calls :meth:`activate` and runs the returned expert.
    """

    def __init__(self, high: nn.Module, low: nn.Module, *, offload: bool) -> None:
        super().__init__()
        self.high, self.low = high, low
        self.offload = offload
        self._host: dict[str, dict[str, torch.Tensor]] = {}
        self._active: str | None = None
        self._device: torch.device | None = None

    @property
    def config(self):
        """The high-noise expert's config (both experts share the architecture)."""
        return self.high.config

    @property
    def dtype(self) -> torch.dtype:
        return self.high.dtype

    def expert(self, name: str) -> nn.Module:
        """The ``high`` or ``low`` transformer."""
        return self.high if name == "high" else self.low

    def _frozen(self, name: str):
        module = self.expert(name)
        for key, param in module.named_parameters():
            if not param.requires_grad:
                yield key, param
        for key, buf in module.named_buffers():
            yield "buffer:" + key, buf

    def _keep_host_copies(self) -> None:
        """A CPU copy of each expert's frozen tensors, made at the first switch (after LoRA moved the targeted
        weights under ``base_layer``), on the device the LoRA weights are on. Nothing on a CPU run."""
        trainable = next((p for p in self.parameters() if p.requires_grad), None)
        self._device = trainable.device if trainable is not None else torch.device("cpu")
        if not self.offload or self._device.type == "cpu":
            return
        pin = self._device.type == "cuda"
        for name in EXPERTS:
            self._host[name] = {k: (t.detach().to("cpu").pin_memory() if pin else t.detach().to("cpu"))
                                for k, t in self._frozen(name)}

    def activate(self, name: str) -> nn.Module:
        """Make ``name`` the expert whose frozen weights are on the device (the other's wait on the CPU)."""
        if self._device is None:
            self._keep_host_copies()
        if self._active == name or not self._host:
            self._active = name
            return self.expert(name)
        idle = "low" if name == "high" else "high"
        self._place(idle, self._host[idle])  # drop the device copy: the CPU copy is identical (frozen)
        self._place(name, {k: t.to(self._device, non_blocking=True) for k, t in self._host[name].items()})
        self._active = name
        return self.expert(name)

    def _place(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        for key, tensor in self._frozen(name):
            tensor.data = tensors[key]

    def residency(self) -> dict[str, str]:
        """``{expert: device type of its frozen weights}`` (tests and logs)."""
        out = {}
        for name in EXPERTS:
            first = next((t for _, t in self._frozen(name)), None)
            out[name] = first.device.type if first is not None else "none"
        return out
