"""Tests mirror the package: every ``dit_lora`` module has ``tests/<same folders>/test_<module>.py``.

A module is a ``.py`` file under ``dit_lora/``; a package ``__init__.py`` counts only when it holds real code
(a function, a class or any statement beyond the docstring, imports and plain assignments such as ``__all__``), and
its test is named after the package: ``dit_lora/plan/__init__.py`` -> ``tests/plan/test_plan.py``,
``dit_lora/__init__.py`` -> ``tests/test_dit_lora.py``. The list is computed from the tree, so a module another
change adds is held to the rule at once. :data:`ALLOWED` names the few modules without a mirrored test file, each
with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "dit_lora"
TESTS = ROOT / "tests"

#: modules with no mirrored test file, and why: keep it short and honest (a stale entry fails the test too)
ALLOWED: dict[str, str] = {
    # The fused row kernels are checked together against their PyTorch references (same shapes, same launcher).
    "kernels/modulate.py": "tests/kernels/test_row_ops.py checks LayerNorm+modulation against its reference",
    "kernels/gated_residual.py": "tests/kernels/test_row_ops.py checks the gated residual against its reference",
    "kernels/rms_norm.py": "tests/kernels/test_row_ops.py checks RMSNorm against its reference",
    "kernels/triton_launch.py": "tests/kernels/test_row_ops.py runs every kernel through its launcher and tiles",
    # Trivial: constants and one-line wrappers with no logic of their own.
    "kernels/optional_triton.py": "trivial: imports Triton if installed; every kernel test goes through it",
    "output/names.py": "trivial: file-name constants",
    # Moved out of data.py (which re-exports them) to keep it under 600 lines; their tests stayed with data.py's.
    "families/videollm/frames.py": "tests/families/videollm/test_data.py tests the frame choice and clip reading",
}


def has_code(init: Path) -> bool:
    """Whether a package ``__init__.py`` holds more than a docstring, imports and plain assignments."""
    body = ast.parse(init.read_text()).body
    plain = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)
    return any(not isinstance(node, plain) and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
               for node in body)


def modules(package: Path = PACKAGE) -> list[Path]:
    """Every module of ``package`` (paths relative to it) that must have a test file."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts or (path.name == "__init__.py" and not has_code(path)):
            continue
        found.append(path.relative_to(package))
    return found


def mirrored_test(module: Path, package_name: str = "dit_lora") -> Path:
    """``tests/``-relative path of the test file ``module`` (relative to the package) must have."""
    if module.name == "__init__.py":
        stem = module.parent.name if module.parent.parts else package_name
        return module.parent / f"test_{stem}.py"
    return module.parent / f"test_{module.stem}.py"


def untested(package: Path = PACKAGE, tests: Path = TESTS) -> list[str]:
    """Modules (``/``-separated, relative to ``package``) without their mirrored test file under ``tests``."""
    return [module.as_posix() for module in modules(package)
            if not (tests / mirrored_test(module, package.name)).is_file()]


def test_every_module_has_a_mirrored_test_file():
    missing = [name for name in untested() if name not in ALLOWED]
    assert not missing, (
        f"{len(missing)} dit_lora module(s) have no test file at the mirrored path: "
        + ", ".join(f"{name} -> tests/{mirrored_test(Path(name)).as_posix()}" for name in missing)
        + ". Write it (or, when another test really covers the module, add it to ALLOWED in tests/test_layout.py "
        "with the reason)."
    )


def test_allow_list_is_not_stale():
    """An allowed module that was removed, or that has its mirrored test file now, leaves the list."""
    current = set(untested())
    stale = sorted(name for name in ALLOWED if name not in current)
    assert not stale, f"remove from ALLOWED in tests/test_layout.py (gone or now tested): {', '.join(stale)}"


def test_the_rule_on_a_made_up_package(tmp_path):
    """The walk itself: plain modules, __init__ with and without code, nested folders, the root package."""
    pkg, tests = tmp_path / "pkg", tmp_path / "tests"
    files = {
        "__init__.py": '"""Docs."""\nfrom .a import f\n__all__ = ["f"]\n',
        "a.py": "def f():\n    return 1\n",
        "sub/__init__.py": "def g():\n    return 2\n",
        "sub/deep/b.py": "X = 1\n",
        "sub/deep/__init__.py": "",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    assert [m.as_posix() for m in modules(pkg)] == ["a.py", "sub/__init__.py", "sub/deep/b.py"]
    assert untested(pkg, tests) == ["a.py", "sub/__init__.py", "sub/deep/b.py"]
    for test in ("test_a.py", "sub/test_sub.py", "sub/deep/test_b.py"):
        (tests / test).parent.mkdir(parents=True, exist_ok=True)
        (tests / test).write_text("")
    assert untested(pkg, tests) == []
    (pkg / "__init__.py").write_text("def load():\n    pass\n")
    assert untested(pkg, tests) == ["__init__.py"]
    assert mirrored_test(Path("__init__.py"), "pkg") == Path("test_pkg.py")
