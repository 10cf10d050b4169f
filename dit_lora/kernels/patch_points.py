"""Patch points: where a model's own code is swapped for code that calls the fused ops, and for which source.

A patch point names one class of an installed library (a transformer block, a norm, an attention
processor), the replacement (a forward taking ``(module, runtime, *args, **kwargs)``, or a factory
``(runtime, original_processor) -> processor``), the ops it calls, and the fingerprint of the
library source it re-implements (the block's ``forward``, the processor's ``__call__``). The
families declare their own points (``families/<name>/kernels.py``); this module and
:mod:`.patch` only apply them and never name a model.

Drift safety: the fingerprint is the sha256 of the method's source parsed and unparsed by
:mod:`ast` (comments, docstring and formatting left out). When the installed library's source no
longer matches, :func:`drift_note` says so in one line and :func:`~dit_lora.kernels.patch.patch_model`
leaves that module on the library's own code.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from torch import nn

FINGERPRINT_CHARS = 16


@dataclass(frozen=True)
class PatchPoint:
    """One class whose forward (or attention processor) the fused ops replace.

    ``target`` is the library class matched exactly (``type(module) is target``, or the type of a
    module's ``processor``); ``when`` an extra structural condition on the module (the config the
    replacement supports). Exactly one of ``forward`` and ``processor`` is given. ``fingerprint``
    is :func:`source_fingerprint` of the re-implemented method (``None``: not checked, for a
    replacement that does not copy library code) and ``written_for`` the version it was taken from.
    """

    name: str
    target: type
    kernels: tuple[str, ...]
    fingerprint: str | None
    forward: Callable | None = None
    processor: Callable | None = None
    when: Callable[[nn.Module], bool] | None = None
    written_for: str = ""

    def __post_init__(self) -> None:
        if (self.forward is None) == (self.processor is None):
            raise ValueError(f"patch point {self.name}: give exactly one of forward= and processor=")
        if not self.kernels:
            raise ValueError(f"patch point {self.name}: name the kernels it calls")

    @property
    def method(self) -> str:
        """The re-implemented method of ``target``: ``forward`` for a module, ``__call__`` for a processor."""
        return "forward" if self.forward is not None else "__call__"

    def source(self) -> Callable:
        """The installed library's method this point re-implements."""
        return getattr(self.target, self.method)

    def matches(self, module: nn.Module) -> bool:
        """Whether ``module`` (or, for a processor point, its processor) is this point's class and shape."""
        owner = getattr(module, "processor", None) if self.processor is not None else module
        return type(owner) is self.target and (self.when is None or bool(self.when(module)))


@functools.cache
def source_fingerprint(fn: Callable) -> str:
    """sha256 (first :data:`FINGERPRINT_CHARS` hex digits) of ``fn``'s source, comments and docstring left out.

    The source is parsed and unparsed by :mod:`ast`, so reformatting or a reworded comment keeps
    the fingerprint (so does renaming the function) and any change to what the code does changes it.
    '' when the source is unavailable.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return ""
    node = tree.body[0]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node.decorator_list, node.name = [], "_"  # what the code does, not what it is called
        body = node.body
        first = body[0] if body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.unparse(tree).encode()).hexdigest()[:FINGERPRINT_CHARS]


def library_version(cls: type) -> str:
    """'<distribution> <version>' of the package that defines ``cls`` (e.g. 'diffusers 0.42.1')."""
    top = cls.__module__.split(".")[0]
    try:
        return f"{top} {metadata.version(top)}"
    except metadata.PackageNotFoundError:
        return top


def drift_note(point: PatchPoint) -> str:
    """'' when the installed source is the one ``point`` was written for; else the one line that says not."""
    if point.fingerprint is None:
        return ""
    installed = source_fingerprint(point.source())
    if installed == point.fingerprint:
        return ""
    written = f" (written for {point.written_for})" if point.written_for else ""
    return (
        f"kernels: {point.target.__qualname__}.{point.method} in the installed {library_version(point.target)} "
        f"is not the source patch point {point.name}{written} re-implements (fingerprint {installed or 'n/a'}, "
        f"expected {point.fingerprint}); fused ops are off for it, it runs the library's own code"
    )


def describe(points: tuple[PatchPoint, ...] | list[PatchPoint]) -> list[dict[str, str]]:
    """One row per point: name, class, method, kernels, recorded and installed fingerprints (for docs and reports)."""
    return [
        {
            "name": p.name,
            "class": f"{p.target.__module__}.{p.target.__qualname__}",
            "method": p.method,
            "kernels": ",".join(p.kernels),
            "fingerprint": p.fingerprint or "",
            "installed": source_fingerprint(p.source()) if p.fingerprint is not None else "",
        }
        for p in points
    ]
