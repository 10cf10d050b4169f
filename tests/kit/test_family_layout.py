"""One file layout for every diffusion family (issue 46): the same files in each folder, each component's class in
the file named for it.

Every registered family whose package sits in ``dit_lora/families/`` and whose data component is a
:class:`~dit_lora.kit.components.DiffusionData` is held to it, so a family added later is checked
on registering. The layout:

- ``STANDARD``: the files every diffusion family folder has; ``kernels.py`` too when the spec declares kernels;
  ``DATA``: its data files (``catalogue.json``: the published checkpoints, their provenance and licenses).
- ``HOMES``: the file each spec component's class is defined in (``model.py`` holds the model and what is read from
  it: buckets, defaults, notes, precision, the demo; ``encoders.py`` the encoders and their setup; ``loss.py`` the
  loss and the data path; ``adapter.py`` the adapter, its card and the files beside it; ``info.py`` a video
  family's checkpoint facts and clip buckets). A few components may also live in a family's own extra module
  (``comfyui.py``'s exporters, ``experts.py``'s trainables).
- ``VARIANTS``: modules holding what a task variant changes (``i2v.py``, ``edit.py``): a class there subclasses the
  family's class from the home file, or extends the kit (``kit/``) directly.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from dit_lora import registry
from dit_lora.contract.spec import FamilySpec
from dit_lora.kit.components import DiffusionData

FAMILIES = "dit_lora.families."
STANDARD = (
    "__init__", "spec", "model", "encoders", "loss", "samples", "plan", "adapter", "demo", "options", "state",
)
DATA = ("catalogue.json",)
HOMES: dict[str, tuple[str, ...]] = {
    "model": ("model",),
    "image_buckets": ("model",),
    "defaults": ("model",),
    "notes": ("model",),
    "precision": ("model",),
    "demo": ("model",),
    "trainables": ("model", "experts"),
    "encoders": ("encoders",),
    "setup": ("encoders",),
    "loss": ("loss",),
    "data": ("loss",),
    "samples": ("samples",),
    "plan": ("plan",),
    "adapter": ("adapter",),
    "card": ("adapter",),
    "fitting": ("adapter",),
    "adapter_extras": ("adapter", "comfyui"),
    "exports": ("adapter", "comfyui"),
    "kernels": ("kernels",),
    "video_frames": ("info",),
    "frame_rate": ("info",),
}
VARIANTS = ("i2v", "edit")


def diffusion_families() -> dict[str, list[str]]:
    """Family package -> its registered names, for every built-in diffusion family."""
    found: dict[str, list[str]] = {}
    for name in registry.available():
        spec = registry.get_spec(name)
        package = type(spec.model).__module__
        if package.startswith(FAMILIES) and isinstance(spec.data, DiffusionData):
            found.setdefault(package.split(".")[2], []).append(name)
    return found


FOUND = diffusion_families()


def folder(package: str) -> Path:
    return Path(importlib.import_module(FAMILIES + package).__file__).parent


def misplaced(package: str, spec: FamilySpec | SimpleNamespace) -> list[str]:
    """Each component whose class is in another file than its home, as ``component: class in file (home ...)``."""
    wrong = []
    for field in dataclasses.fields(FamilySpec):
        homes = HOMES.get(field.name)
        value = getattr(spec, field.name)
        if homes is None or value is None:
            continue
        cls = value if inspect.isclass(value) else type(value)
        module = cls.__module__
        if not module.startswith(f"{FAMILIES}{package}."):
            continue  # the kit's or a shared class: the family states nothing of its own here
        stem = module.rsplit(".", 1)[1]
        if stem in homes or (stem in VARIANTS and variant_fits(cls, package, homes)):
            continue
        wrong.append(f"{field.name}: {cls.__name__} is in {stem}.py, belongs in {' or '.join(h + '.py' for h in homes)}")
    return wrong


def variant_fits(cls: type, package: str, homes: tuple[str, ...]) -> bool:
    """A variant's class subclasses the family's class from the home file, or no family class at all."""
    own = [base for base in cls.__mro__[1:] if base.__module__.startswith(f"{FAMILIES}{package}.")]
    return not own or own[0].__module__.rsplit(".", 1)[1] in homes


def test_the_diffusion_families_are_found():
    """The scan sees every built-in family whose model is a DiffusionModel (the kit's base), with all its names, and
    no video LLM."""
    from dit_lora.kit.components import DiffusionModel

    models: dict[str, list[str]] = {}
    for name in registry.available():
        module = type(registry.get_spec(name).model).__module__
        if module.startswith(FAMILIES) and isinstance(registry.get_spec(name).model, DiffusionModel):
            models.setdefault(module.split(".")[2], []).append(name)
    assert FOUND == models and len(FOUND) >= 2
    assert "videollm" not in FOUND


@pytest.mark.parametrize("package", sorted(FOUND))
def test_family_folder_has_the_standard_files(package):
    names = {path.stem for path in folder(package).glob("*.py")}
    wanted = set(STANDARD) | ({"kernels"} if any(registry.get_spec(n).kernels for n in FOUND[package]) else set())
    missing = [m + ".py" for m in sorted(wanted - names)] + [d for d in DATA if not (folder(package) / d).is_file()]
    assert not missing, (
        f"families/{package}/ lacks {', '.join(missing)}: every diffusion family has "
        f"{', '.join(s + '.py' for s in STANDARD)} and {', '.join(DATA)} (and kernels.py when it declares kernels); "
        "see tests/kit/test_family_layout.py."
    )


@pytest.mark.parametrize("package", sorted(FOUND))
def test_each_component_is_in_the_file_named_for_it(package):
    wrong = [f"{name}: {line}" for name in FOUND[package] for line in misplaced(package, registry.get_spec(name))]
    assert not wrong, f"families/{package}/: " + "; ".join(wrong)


def test_misplaced_names_the_family_and_the_file():
    """The check itself: a component from another file is named with its file and its home."""

    class Stray:  # defined here, so pretend it lives in the family's outputs.py
        pass

    Stray.__module__ = f"{FAMILIES}wan.outputs"
    spec = SimpleNamespace(**{**{field.name: None for field in dataclasses.fields(FamilySpec)}, "samples": Stray()})
    assert misplaced("wan", spec) == ["samples: Stray is in outputs.py, belongs in samples.py"]
