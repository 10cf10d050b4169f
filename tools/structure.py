"""Structure figures of the ``dit_lora`` package, the before/after of issue 34 (``python tools/structure.py``).

- import circles: strongly connected groups of modules in the import graph (grimp, which counts imports inside
  functions too, but not those under ``if TYPE_CHECKING:``), and the modules in them;
- import circles counting ``TYPE_CHECKING`` imports too: what a type checker follows (issue 46 wants none);
- imports of dit_lora modules written inside functions (AST);
- the family contract's required methods;
- ``TrainConfig``'s top-level fields and the functions that take the whole config (a parameter ``cfg``/``config``).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dit_lora"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def inner_imports() -> list[tuple[str, int, str]]:
    """``(file, line, imported module)`` of each dit_lora import written inside a function."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module, is_package = _module_name(path), path.name == "__init__.py"
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom):
                    target = _resolve(node, module, is_package)
                elif isinstance(node, ast.Import):
                    target = ",".join(a.name for a in node.names if a.name.startswith("dit_lora"))
                else:
                    continue
                if target.startswith("dit_lora"):
                    found.append((str(path.relative_to(ROOT)), node.lineno, target))
    return sorted(set(found))


def circles(type_checking: bool = False) -> list[list[str]]:
    """Strongly connected components (more than one module) of the package's import graph; ``type_checking``:
    imports under ``if TYPE_CHECKING:`` count too (they never run, but the type checker follows them, and a circle
    among them says the layers are not one way)."""
    import grimp

    # no cache: grimp's cache answered one setting of the TYPE_CHECKING flag with the graph built for the other
    graph = grimp.build_graph(
        "dit_lora", include_external_packages=False, exclude_type_checking_imports=not type_checking, cache_dir=None
    )
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for m in modules:
        if m not in index:
            visit(m)
    return out


def whole_config_functions() -> int:
    """Functions with a parameter named ``cfg`` or ``config`` (the run's whole config)."""
    count = 0
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.args + node.args.kwonlyargs]
                count += any(n in ("cfg", "config") for n in names)
    return count


def required_members() -> int:
    """The members of the protocols of the spec's required components (``contract/spec.py``'s ``REQUIRED``): what
    every family must write."""
    from dit_lora.contract.capabilities import members
    from dit_lora.contract.spec import REQUIRED

    return sum(len(members(proto)) for proto in REQUIRED.values())


def main() -> None:
    sys.path.insert(0, str(ROOT))
    inner = inner_imports()
    groups = circles()
    typed_groups = circles(type_checking=True)
    from dit_lora.config import TrainConfig

    report = {
        "import circles": len(groups),
        "modules in circles": sum(len(g) for g in groups),
        "import circles counting TYPE_CHECKING imports": len(typed_groups),
        "modules in them": sum(len(g) for g in typed_groups),
        "imports inside functions": len(inner),
        "files with imports inside functions": len({f for f, _, _ in inner}),
        "TrainConfig top-level fields": len(dataclasses.fields(TrainConfig)),
        "functions taking the whole config": whole_config_functions(),
    }
    report["family contract required methods"] = required_members()
    print(json.dumps(report, indent=2))
    if "-v" in sys.argv:
        for g in groups:
            print("circle:", ", ".join(g))
        for g in typed_groups:
            print("circle counting TYPE_CHECKING imports:", ", ".join(g))


if __name__ == "__main__":
    main()
