"""BENCHMARK-ONLY torchvision shim: the few PIL transforms diffusers' Sana DreamBooth example uses.

Not part of dit-lora and never imported by it. ``bench_sana_cpu.py`` writes a throw-away
``torchvision`` package into a temporary directory at run time (``write_torchvision_package``)
whose modules re-export what is defined here, and puts that directory on the PYTHONPATH of the
child process that runs ``train_dreambooth_lora_sana.py``. It exists because torchvision cannot be
installed on this CPU-only machine (its wheels on the index are CUDA builds); where a real
torchvision is installed, the benchmark uses it instead.

Only what the example calls is implemented, on PIL images, following torchvision's semantics:
``Resize(int)`` resizes the shorter side (aspect ratio kept, PIL bilinear, which is what
torchvision does for PIL inputs), ``CenterCrop``/``RandomCrop`` (+ ``get_params``),
``RandomHorizontalFlip``, ``ToTensor`` (uint8 HWC -> float CHW in [0, 1]), ``Normalize``,
``Compose``, ``InterpolationMode`` and ``functional.crop``.

transformers (>= 5) decides whether torchvision is installed with ``importlib.util.find_spec``
and, if so, imports much more of it (``torchvision.io``, ``transforms.v2`` ...). The child process
that uses this shim therefore runs under ``step_timer.py`` with
``STEP_TIMER_HIDE_FROM_TRANSFORMERS=torchvision``, which makes transformers' availability check
report torchvision as absent; only the example's own ``from torchvision import transforms`` sees
the shim. The example applies them once per
image while building its dataset, before training, so they do not enter the timed steps.
"""

from __future__ import annotations

import enum
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image

__all__ = [
    "CenterCrop",
    "Compose",
    "InterpolationMode",
    "Normalize",
    "RandomCrop",
    "RandomHorizontalFlip",
    "Resize",
    "ToTensor",
    "crop",
    "center_crop",
    "hflip",
    "write_torchvision_package",
]

SHIM_VERSION = "0.0.0+dit-lora-benchmark-shim"


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


_PIL_MODES = {
    InterpolationMode.NEAREST: Image.NEAREST,
    InterpolationMode.NEAREST_EXACT: Image.NEAREST,
    InterpolationMode.BILINEAR: Image.BILINEAR,
    InterpolationMode.BICUBIC: Image.BICUBIC,
    InterpolationMode.BOX: Image.BOX,
    InterpolationMode.HAMMING: Image.HAMMING,
    InterpolationMode.LANCZOS: Image.LANCZOS,
}


def _pair(size) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    if len(size) == 1:
        return int(size[0]), int(size[0])
    return int(size[0]), int(size[1])


def crop(img: Image.Image, top: int, left: int, height: int, width: int) -> Image.Image:
    """torchvision.transforms.functional.crop for PIL images."""
    return img.crop((left, top, left + width, top + height))


def center_crop(img: Image.Image, output_size) -> Image.Image:
    th, tw = _pair(output_size)
    w, h = img.size
    top = int(round((h - th) / 2.0))
    left = int(round((w - tw) / 2.0))
    return crop(img, top, left, th, tw)


def hflip(img: Image.Image) -> Image.Image:
    return img.transpose(Image.FLIP_LEFT_RIGHT)


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class Resize:
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
        if max_size is not None:
            raise NotImplementedError("benchmark shim: Resize(max_size=...) is not implemented")
        self.size = size
        self.interpolation = interpolation

    def __call__(self, img: Image.Image) -> Image.Image:
        w, h = img.size
        if isinstance(self.size, int) or len(self.size) == 1:
            short = self.size if isinstance(self.size, int) else int(self.size[0])
            if w <= h:
                new_w, new_h = short, int(short * h / w)
            else:
                new_w, new_h = int(short * w / h), short
        else:
            new_h, new_w = int(self.size[0]), int(self.size[1])
        if (new_w, new_h) == (w, h):
            return img
        return img.resize((new_w, new_h), _PIL_MODES[InterpolationMode(self.interpolation)])


class CenterCrop:
    def __init__(self, size):
        self.size = _pair(size)

    def __call__(self, img: Image.Image) -> Image.Image:
        return center_crop(img, self.size)


class RandomCrop:
    def __init__(self, size):
        self.size = _pair(size)

    @staticmethod
    def get_params(img: Image.Image, output_size) -> tuple[int, int, int, int]:
        w, h = img.size
        th, tw = _pair(output_size)
        if h < th or w < tw:
            raise ValueError(f"benchmark shim: crop size {(th, tw)} is larger than the image {(h, w)}")
        top = 0 if h == th else random.randint(0, h - th)
        left = 0 if w == tw else random.randint(0, w - tw)
        return top, left, th, tw

    def __call__(self, img: Image.Image) -> Image.Image:
        return crop(img, *self.get_params(img, self.size))


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, img: Image.Image) -> Image.Image:
        return hflip(img) if random.random() < self.p else img


class ToTensor:
    def __call__(self, img: Image.Image) -> torch.Tensor:
        arr = np.asarray(img.convert("RGB") if img.mode not in ("RGB", "L") else img, dtype=np.uint8)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div(255.0)


class Normalize:
    def __init__(self, mean, std, inplace: bool = False):
        self.mean = torch.as_tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.as_tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        return (tensor - self.mean.to(tensor.dtype)) / self.std.to(tensor.dtype)


def write_torchvision_package(root: str | Path) -> Path:
    """Write a ``torchvision`` package re-exporting this shim under ``root``; return ``root``.

    Layout: ``root/torchvision/{__init__,_shim_impl}.py`` and
    ``root/torchvision/transforms/{__init__,functional}.py``. There is no ``.dist-info``, so
    ``importlib.metadata`` (and thus transformers'/diffusers' availability checks) still report
    torchvision as absent; only direct ``import torchvision`` sees the shim.
    """
    root = Path(root)
    pkg = root / "torchvision"
    (pkg / "transforms").mkdir(parents=True, exist_ok=True)
    banner = '"""BENCHMARK-ONLY shim generated by dit-lora benchmarks/torchvision_shim.py; not torchvision."""\n'
    (pkg / "_shim_impl.py").write_text(Path(__file__).read_text())
    (pkg / "__init__.py").write_text(banner + f"__version__ = {SHIM_VERSION!r}\nfrom . import transforms  # noqa: F401\n")
    names = ", ".join(["CenterCrop", "Compose", "InterpolationMode", "Normalize", "RandomCrop",
                       "RandomHorizontalFlip", "Resize", "ToTensor"])
    (pkg / "transforms" / "__init__.py").write_text(
        banner + f"from torchvision._shim_impl import {names}  # noqa: F401\nfrom . import functional  # noqa: F401\n"
    )
    (pkg / "transforms" / "functional.py").write_text(
        banner + "from torchvision._shim_impl import center_crop, crop, hflip  # noqa: F401\n"
    )
    return root
