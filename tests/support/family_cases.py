"""What the shared tests ask of each family, answered in the family's own test folder.

A shared test (one outside ``tests/families/<package>/``) takes its families from the registry, never from a list of
its own, so a new family is tested without editing it. Where such a test needs a fact only the family knows (the
stand-in demo model of the Hub id its guide names, a probe of its loss, ComfyUI's key map for its transformer), the
family states it in ``tests/families/<package>/cases.py``, and the test reads it with :func:`case`: a family that
lacks a case the test needs fails there, naming the family, the file and the case, so it is never skipped silently.

The cases the shared tests read (each documented where it is read):

* ``GUIDE_STAND_INS`` (tests/test_guides.py): Hub id its guide's main example names -> the options that make
  ``--demo`` build a tiny model of that architecture (None: drop the option for a local folder).
* ``SHARED_OPTIONS`` (tests/config/test_owners.py): each name's options among the shared groups that test checks.
* ``masked_loss_probe(name)`` and ``MASKED_LOSS_SAME`` (tests/modeling/test_masked_loss.py): the loss of a name
  that reads ``--masked_loss``, with a stand-in transformer; names probed as another name of the same loss class.
* ``generic_kernel_probe()`` or ``NO_GENERIC_KERNEL_PROBE`` (tests/kernels/test_patch_image_families.py): the tiny
  transformer of a family without patch points of its own, the generic points' test inputs; or why there is none.
* ``COMFYUI`` (tests/output/test_comfyui_types.py) and ``COMFYUI_LOADER`` or ``NO_COMFYUI_LOADER``
  (tests/output/test_comfyui_types_loader.py): a family exporting ``comfyui``, as ComfyUI reads it.
* ``NO_CARD_CAPTION_LENGTH`` (tests/kit/test_prompts.py): why a family whose caption length is a ``CaptionLength``
  has a card snippet that does not pass it to the pipeline's call.
* ``ALSO_TRAINS_FOLDERS_OF`` (tests/setup/test_family_inference.py): the sibling folders a name trains too, as its
  ``info.also_trains_folders_of`` declares them.
* ``NO_DEMO``, ``CARD_ON_RUN_OF`` and ``UPSTREAM_SYNCS`` (tests/conformance): names without a demo config of
  their own and what covers them; the name whose demo run checks another's card; names whose step syncs inside a
  library.

A value that differs between the names of one package is a dict keyed by name (:func:`case` with ``per_name``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from helpers import ROOT

#: the file of a family's answers, in its test folder
CASES_FILE = "cases.py"
#: every case a shared test reads (the list above): a cases.py defining another public name has misspelt one
KNOWN_CASES = frozenset({
    "GUIDE_STAND_INS", "SHARED_OPTIONS", "masked_loss_probe", "MASKED_LOSS_SAME", "generic_kernel_probe",
    "NO_GENERIC_KERNEL_PROBE", "comfyui_export", "comfyui_loader", "NO_COMFYUI_LOADER", "ALSO_TRAINS_FOLDERS_OF",
    "NO_DEMO", "CARD_ON_RUN_OF", "UPSTREAM_SYNCS", "NO_CARD_CAPTION_LENGTH",
})
_MISSING = object()
_LOADED: dict[Path, ModuleType | None] = {}


def package_of(name: str) -> str | None:
    """The package (folder) of the family ``name`` under ``dit_lora/families/`` (``llava_next_video`` -> ``videollm``),
    from its registry entry's factory; None for a family registered from elsewhere (the toy family's tests keep
    their own cases)."""
    from dit_lora.registry import BUILT_IN_PACKAGE, entry_for

    factory = entry_for(name).factory
    module = factory if isinstance(factory, str) else factory.__module__
    module = module.partition(":")[0]
    prefix = BUILT_IN_PACKAGE + "."
    return module[len(prefix):].split(".")[0] if module.startswith(prefix) else None


def cases_path(name: str) -> Path | None:
    """``tests/families/<package>/cases.py`` of the family ``name`` (None: not a built-in family)."""
    package = package_of(name)
    return None if package is None else ROOT / "tests" / "families" / package / CASES_FILE


def cases(name: str) -> ModuleType | None:
    """The family's cases module (loaded once by its path), None when its folder has none."""
    path = cases_path(name)
    if path is None:
        return None
    if path not in _LOADED:
        module = None
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"family_cases_{path.parent.name}", path)
            assert spec is not None and spec.loader is not None, path
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        _LOADED[path] = module
    return _LOADED[path]


def has_case(name: str, attr: str, *, per_name: bool = False) -> bool:
    """Whether the family ``name`` states ``attr`` (for ``name`` itself, with ``per_name``)."""
    value = getattr(cases(name), attr, _MISSING)
    if value is _MISSING:
        return False
    return not per_name or not isinstance(value, dict) or name in value


def case(name: str, attr: str, needed_for: str, *, per_name: bool = False, default: Any = _MISSING) -> Any:
    """The family's ``attr`` (with ``per_name``: a dict's value for ``name``, or one value for every name); without
    it, ``default`` when one is given, else the test fails naming the family, the file, the case and what needs it."""
    value = getattr(cases(name), attr, _MISSING)
    if per_name and isinstance(value, dict):
        value = value.get(name, _MISSING)
    if value is not _MISSING:
        return value
    if default is not _MISSING:
        return default
    path = cases_path(name)
    where = path.relative_to(ROOT) if path is not None else "its tests"
    pytest.fail(
        f"The family `{name}` states no `{attr}` in {where}, which {needed_for} needs. Add it there "
        f"(tests/support/family_cases.py says what each case holds)."
    )


def entry_defaults() -> list[str]:
    """The default name of each built-in registry entry, in registry order (one per family package)."""
    from dit_lora.registry import BUILT_IN_PACKAGE, entries

    return [e.default for e in entries() if str(e.factory).startswith(BUILT_IN_PACKAGE + ".")]
