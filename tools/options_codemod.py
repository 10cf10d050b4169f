"""Rewrite flat option reads through their section: ``cfg.rank`` -> ``cfg.lora.rank`` (issue 46, point 4).

``TrainConfig`` once read a flat option name through its section (``TrainConfig.__getattr__``), which the type
checker could not follow. This codemod writes each such read out in full, wherever the expression in front is a
run config, and keeps every other byte of the file as it was (it inserts ``.<section>`` after the expression; it
never re-prints code). It is rerunnable: a read already through its section is left alone, so a second run
changes nothing.

What counts as a config (an expression the codemod rewrites the reads of):

- a name ``cfg`` (unless the same function binds it to something plainly not a config: a ``SimpleNamespace``, a
  dict, a model's ``.config``, or annotates it as a union such as ``TrainConfig | Resolved``), a parameter
  annotated ``TrainConfig``, and a name bound in the same function to a config expression;
- ``<anything>.cfg`` (``self.cfg``, ``run.cfg``) and the config a result holds (``defaults.config``,
  ``chosen.config``, ``resolved.config``, ``plain.config``, ``choose_defaults(...).config``, ``resolve(...).config``);
- a call that returns one: ``parse_config(...)``, ``parse_run(...)``, ``TrainConfig(...)``,
  ``TrainConfig.for_family(...)``, ``held_out.folder_config(...)``, ``replace(<config>, ...)``.

What it reports and leaves as it is ("could not decide"): a flat option read on another name that looks like a
config (``config``, ``conf``, ``c``, a ``cfg`` bound to a stand-in), ``getattr``/``hasattr`` of a config with an
option name as a string or computed, and a read on a conditional expression holding a config. A person decides
those (``TrainConfig.option(name)`` reads a name given as data).

``python tools/options_codemod.py [--check] [PATH ...]`` (default: ``dit_lora`` and ``tests``); ``--check`` writes
nothing and exits 1 when a file would change.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: what ``.config`` of these names is: a run config (``ChosenDefaults.config``, ``Resolved.config``)
CONFIG_HOLDERS = frozenset({"defaults", "chosen", "resolved", "plain", "checked"})
#: calls whose result's ``.config`` is a run config (a ``ChosenDefaults``, a ``Resolved``)
RESULT_CALLS = frozenset({"choose_defaults", "resolve", "resolve_config"})
#: calls that return a run config
CONFIG_CALLS = frozenset({"parse_config", "parse_run", "TrainConfig", "for_family", "folder_config"})
#: names that look like a config but are not known to be one: their flat reads are reported, not rewritten
LOOKALIKES = frozenset({"cfg", "config", "conf", "c", "cfg2", "base_cfg", "new_cfg", "old_cfg", "run_cfg"})
#: a ``cfg`` bound to one of these in a function is a stand-in, not a run config
STAND_INS = frozenset({"SimpleNamespace", "dict", "Namespace"})


def section_of() -> dict[str, str]:
    """Each common option's flat name -> the attribute of its section on ``TrainConfig``."""
    sys.path.insert(0, str(ROOT))
    from dit_lora.config.sections import SECTION_OF

    return dict(SECTION_OF)


@dataclass
class Scope:
    """What one function (or the module) binds: the names that hold a config, and whether ``cfg`` is a stand-in."""

    configs: set[str] = field(default_factory=set)
    stand_in_cfg: bool = False
    #: parameters annotated as a union of a config and something else (``TrainConfig | Resolved``): undecided
    unions: set[str] = field(default_factory=set)


def _terminal(node: ast.AST) -> str | None:
    """The last name of ``a.b.c`` (``c``), of ``a`` (``a``); None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _call_name(node: ast.Call) -> str | None:
    return _terminal(node.func)


def is_config(node: ast.AST, scope: Scope) -> bool:
    """Whether ``node`` is a run config by the rules of the module docstring."""
    if isinstance(node, ast.Name):
        if node.id in scope.unions:
            return False
        return node.id in scope.configs or (node.id == "cfg" and not scope.stand_in_cfg)
    if isinstance(node, ast.Attribute):
        return node.attr == "cfg" or _holds_config(node)
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if name in CONFIG_CALLS:
            return True
        return name == "replace" and bool(node.args) and is_config(node.args[0], scope)
    return False


def _holds_config(node: ast.Attribute) -> bool:
    """``<holder>.config`` where the holder is a result that carries a run config."""
    if node.attr != "config":
        return False
    holder = node.value
    if isinstance(holder, ast.Call):
        return _call_name(holder) in RESULT_CALLS
    return _terminal(holder) in CONFIG_HOLDERS


def _is_stand_in(value: ast.AST) -> bool:
    """A value plainly not a run config: a namespace or dict stand-in, a literal, a model's ``.config``."""
    if isinstance(value, (ast.Dict, ast.Constant, ast.List, ast.Tuple)):
        return True
    if isinstance(value, ast.Call) and _call_name(value) in STAND_INS:
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id.startswith("_Cfg"):
        return True
    return isinstance(value, ast.Attribute) and value.attr == "config" and not _holds_config(value)


def _annotated_config(annotation: ast.AST | None) -> bool:
    return annotation is not None and "TrainConfig" in ast.unparse(annotation)


def scope_of(func: ast.AST) -> Scope:
    """The config names of one function (or module): its parameters and its own assignments (not nested ones)."""
    scope = Scope()
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = func.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            if _annotated_config(arg.annotation):
                text = ast.unparse(arg.annotation)  # a union: the name may hold another type
                (scope.unions if "|" in text or "Union" in text else scope.configs).add(arg.arg)
    for _ in range(2):  # twice: a name bound from another bound name
        for node in _own_nodes(func):
            targets, value = _binding(node)
            for target in targets:
                if not isinstance(target, ast.Name):
                    continue
                if target.id == "cfg" and value is not None and _is_stand_in(value):
                    scope.stand_in_cfg = True
                    continue
                annotated = isinstance(node, ast.AnnAssign) and _annotated_config(node.annotation)
                if annotated or (value is not None and is_config(value, scope)):
                    scope.configs.add(target.id)
    return scope


def _binding(node: ast.AST) -> tuple[list[ast.AST], ast.AST | None]:
    """The names an assignment binds and its value (a tuple assignment comes split: :func:`_own_nodes`)."""
    if isinstance(node, ast.Assign) and not _tuple_assign(node):
        return list(node.targets), node.value
    if isinstance(node, ast.AnnAssign):
        return [node.target], node.value
    return [], None


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``func``'s body, not those of functions or classes nested in it; ``a, b = x, y`` also comes as
    ``a = x`` and ``b = y``."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.Assign) and _tuple_assign(node):
            yield from _split_tuple(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _tuple_assign(node: ast.Assign) -> bool:
    return len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple)


def _split_tuple(node: ast.Assign) -> Iterator[ast.Assign]:
    """``a, b = x, y`` as ``a = x`` and ``b = y``."""
    targets, values = node.targets[0], node.value
    assert isinstance(targets, ast.Tuple) and isinstance(values, ast.Tuple)
    for target, value in zip(targets.elts, values.elts):
        yield ast.Assign(targets=[target], value=value, lineno=node.lineno)


def _inner(outer: Scope, func: ast.AST) -> Scope:
    """A nested function's scope: its own bindings over the enclosing ones (a parameter ``cfg`` binds afresh)."""
    own = scope_of(func)
    params = set()
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        params = {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
    configs = (outer.configs - params) | own.configs
    unions = (outer.unions - params) | own.unions
    stand_in = own.stand_in_cfg or (outer.stand_in_cfg and "cfg" not in params)
    return Scope(configs=configs, stand_in_cfg=stand_in, unions=unions)


@dataclass
class Found:
    """One file's rewrites (``(line, byte column, text to insert)``) and what could not be decided."""

    inserts: list[tuple[int, int, str]] = field(default_factory=list)
    undecided: list[tuple[int, str]] = field(default_factory=list)


def _looks_like_config(node: ast.AST) -> bool:
    return _terminal(node) in LOOKALIKES or (isinstance(node, ast.IfExp) and "cfg" in ast.unparse(node))


def _visit(node: ast.AST, scope: Scope, sections: dict[str, str], found: Found) -> None:
    for child in ast.iter_child_nodes(node):
        inner = scope
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = _inner(scope, child)
        _check(child, scope, sections, found)
        _visit(child, inner, sections, found)


def _check(node: ast.AST, scope: Scope, sections: dict[str, str], found: Found) -> None:
    """Record the rewrite of a flat read on a config, or what is left undecided."""
    if isinstance(node, ast.Attribute) and node.attr in sections:
        value = node.value
        if is_config(value, scope):
            assert value.end_lineno is not None and value.end_col_offset is not None
            found.inserts.append((value.end_lineno, value.end_col_offset, "." + sections[node.attr]))
        elif _looks_like_config(value):
            found.undecided.append((node.lineno, f"{ast.unparse(node)} (not known to be a run config)"))
    elif isinstance(node, ast.Call) and _call_name(node) in ("getattr", "hasattr") and len(node.args) >= 2:
        target, name = node.args[0], node.args[1]
        if not (is_config(target, scope) or _looks_like_config(target)):
            return
        if isinstance(name, ast.Constant) and name.value not in sections:
            return  # not a common option (explicit_options, a section, family_options)
        found.undecided.append((node.lineno, f"{ast.unparse(node)} (an option read by name)"))


def rewrite(source: str, sections: dict[str, str]) -> tuple[str, Found]:
    """``source`` with each flat option read on a config written through its section, and what was found."""
    tree = ast.parse(source)
    found = Found()
    _visit(tree, scope_of(tree), sections, found)
    lines = source.splitlines(keepends=True)
    for line, col, text in sorted(set(found.inserts), reverse=True):
        raw = lines[line - 1].encode()
        lines[line - 1] = (raw[:col] + text.encode() + raw[col:]).decode()
    return "".join(lines), found


def _files(paths: list[str]) -> Iterator[Path]:
    for given in paths:
        path = Path(given)
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or ``--check``) the files under the given paths; print the counts and each undecided read."""
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    paths = [a for a in args if a != "--check"] or [str(ROOT / "dit_lora"), str(ROOT / "tests")]
    sections = section_of()
    changed, reads, undecided = [], 0, []
    for path in _files(paths):
        source = path.read_text(encoding="utf-8")
        new, found = rewrite(source, sections)
        reads += len(set(found.inserts))
        undecided += [f"{path}:{line}: {what}" for line, what in found.undecided]
        if new != source:
            changed.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    verb = "would rewrite" if check else "rewrote"
    print(f"{verb} {reads} flat option reads in {len(changed)} files; {len(undecided)} left undecided")
    for line in undecided:
        print("undecided:", line)
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
