"""Shared fixtures of the Wan family tests: tiny offline pipelines (built once per session, on demand), the family's
own loading of them, pixel clips, and a stand-in transformer that records what the loss feeds it.

Nothing here is autouse; a module that must not reach the network says `pytestmark =
pytest.mark.usefixtures("wan_offline")`.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from dit_lora.families.wan.demo import TINY_WAN_GEOMETRY

FRAMES, HEIGHT, WIDTH = (TINY_WAN_GEOMETRY[k] for k in ("num_frames", "height", "width"))
PROMPTS = ["a red square moving left to right", "blue"]


@pytest.fixture(scope="module")
def wan_offline():
    """No network for the module's tests (tests/support/offline.py)."""
    from offline import no_network

    yield from no_network()


@pytest.fixture(scope="session")
def wan_model(tmp_path_factory) -> Callable[[str], Path]:
    """``wan_model(variant)``: the folder of the tiny pipeline of ``variant`` (built at its first request)."""
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    root = tmp_path_factory.mktemp("wan-models")
    built: dict[str, Path] = {}

    def get(variant: str) -> Path:
        if variant not in built:
            built[variant] = build_tiny_wan_pipeline(root / variant, variant=variant)
        return built[variant]

    return get


def wan_config(model: Path, family: str = "wan", **kw):
    """A TrainConfig for ``family`` on the tiny pipeline ``model`` (fp32, the tiny geometry)."""
    from dit_lora.config import TrainConfig

    values = dict(family=family, pretrained_model_name_or_path=str(model), train_data_dir="unused",
                  mixed_precision="no", max_num_frames=FRAMES, height=HEIGHT, width=WIDTH, rank=4, lora_alpha=4,
                  seed=0)
    values.update(kw)
    return TrainConfig.for_family(**values)


@pytest.fixture(scope="session")
def wan_load(wan_model) -> Callable[..., tuple[Any, Any, Any]]:
    """``wan_load(variant, family="wan", **options) -> (family, cfg, comps)``: checked, then loaded on the CPU by the
    family's own ``load_components`` (fresh components each call: tests may change them)."""
    from dit_lora.registry import get_family

    def load(variant: str, family: str = "wan", **kw):
        fam = get_family(family)
        cfg = wan_config(wan_model(variant), family, **kw)
        fam.model.validate_config(cfg)
        return fam, cfg, fam.model.load_components(cfg, torch.device("cpu"))

    return load


def clips(batch: int = 2, seed: int = 1) -> torch.Tensor:
    """``(B, F, 3, H, W)`` in [-1, 1] on the uint8 grid (``u / 127.5 - 1``), so a frame survives a trip through a PIL
    image up to float rounding: a smooth random pattern (a few coarse cells upsampled) the tiny VAE sees as a
    picture, not noise."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(batch * FRAMES, 3, 4, 4, generator=g)
    smooth = torch.nn.functional.interpolate(coarse, size=(HEIGHT, WIDTH), mode="bilinear", align_corners=False)
    u8 = (smooth * 255).round().clamp(0, 255)
    return (u8 / 127.5 - 1.0).view(batch, FRAMES, 3, HEIGHT, WIDTH)


class Recorder(torch.nn.Module):
    """Stands in for a Wan transformer: records each call's keyword inputs and answers ``answer(hidden_states)``
    (default: zeros with the output channels), or runs ``inner`` and records its output too."""

    def __init__(self, out_channels: int, patch_size=(1, 2, 2), inner: torch.nn.Module | None = None,
                 answer: Callable[[torch.Tensor], torch.Tensor] | None = None):
        super().__init__()
        self.out_channels, self.inner, self.answer = out_channels, inner, answer
        self.config = type("Config", (), {"patch_size": tuple(patch_size)})()
        self.calls: list[dict[str, Any]] = []

    def forward(self, hidden_states, timestep, return_dict=True, **kw):
        call = {"hidden_states": hidden_states.detach().clone(), "timestep": timestep.detach().clone(), **kw}
        if self.inner is not None:
            out = self.inner(hidden_states=hidden_states, timestep=timestep, return_dict=False, **kw)[0]
        elif self.answer is not None:
            out = self.answer(hidden_states)
        else:
            b, _, f, h, w = hidden_states.shape
            out = hidden_states.new_zeros(b, self.out_channels, f, h, w)
        call["output"] = out.detach().clone()
        self.calls.append(call)
        return (out,)


@pytest.fixture(scope="session")
def wan_kit() -> types.SimpleNamespace:
    """The plain helpers above for the test modules (a conftest is not importable by name under
    ``--import-mode=importlib``): ``clips``, ``Recorder``, ``PROMPTS``, ``FRAMES``, ``HEIGHT``, ``WIDTH``."""
    return types.SimpleNamespace(clips=clips, Recorder=Recorder, PROMPTS=PROMPTS, FRAMES=FRAMES, HEIGHT=HEIGHT,
                                 WIDTH=WIDTH)
