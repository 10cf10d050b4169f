"""``FamilyEntry`` (``dit_lora/registry.py``): what a family package declares, checked when it is made."""

from __future__ import annotations

import dataclasses

import pytest

from dit_lora.families.sana.options import SanaOptions
from dit_lora.registry import FamilyEntry


class Opts:
    """An options class (the entry holds the class itself)."""


class B:
    """Another name's options class."""


def fam_spec(name):
    """A factory: a family's function that builds a name's spec."""
    return name


def test_an_entry_is_immutable_and_its_first_name_is_the_recipe_default():
    entry = FamilyEntry(names=("one", "two"), factory=fam_spec)
    assert entry.default == "one" and entry.recipe_script == "recipes/one_lora.py"
    assert FamilyEntry(names=("x",), factory=str, recipe="other_lora.py").recipe_script == "recipes/other_lora.py"
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.names = ("three",)


@pytest.mark.parametrize("names", [(), "sana", ("a", "a"), ("a", "")])
def test_names_must_be_a_tuple_of_distinct_names(names):
    with pytest.raises(ValueError, match="FamilyEntry.names"):
        FamilyEntry(names=names, factory=str)


def test_options_for_each_name():
    shared = FamilyEntry(names=("a", "b"), factory=str, options=Opts)
    assert shared.options_for("a") is shared.options_for("b") is Opts
    split = FamilyEntry(names=("a", "b"), factory=str, options={"b": B})
    assert split.options_for("a") is None and split.options_for("b") is B
    with pytest.raises(TypeError):  # the mapping is read-only too
        split.options["a"] = Opts
    with pytest.raises(ValueError, match="not among its names"):
        FamilyEntry(names=("a",), factory=str, options={"c": Opts})


def test_build_calls_the_factory_with_the_name_and_refuses_another():
    made = []
    entry = FamilyEntry(names=("a", "b"), factory=lambda name: made.append(name) or name.upper())
    assert entry.build("b") == "B" and made == ["b"]
    with pytest.raises(KeyError, match="'c' is not a name of this entry"):
        entry.build("c")


def test_pipelines_for_each_name():
    one = FamilyEntry(names=("a", "b"), factory=fam_spec, pipelines=("APipeline", "AOtherPipeline"))
    assert one.pipelines_for("a") == one.pipelines_for("b") == ("APipeline", "AOtherPipeline")
    per_name = FamilyEntry(names=("a", "b"), factory=fam_spec, pipelines={"a": ["APipeline"], "b": ("BPipeline",)})
    assert per_name.pipelines_for("a") == ("APipeline",) and per_name.pipelines_for("b") == ("BPipeline",)
    assert FamilyEntry(names=("a",), factory=fam_spec).pipelines_for("a") == ()  # undeclared: the spec says


def test_every_entry_declares_the_pipelines_its_specs_train():
    """The static fact (read by --help and family inference without building a spec) is the spec's own."""
    from dit_lora.registry import available, entry_for, get_spec

    for name in available():
        declared = entry_for(name).pipelines_for(name)
        assert declared == get_spec(name).info.pipeline_classes, (name, declared)


def test_train_help_imports_no_torch():
    """`dit-lora train --help` lists every family's pipeline from the registry entries: no spec, no torch."""
    import subprocess
    import sys

    code = (
        "import contextlib, io, sys\n"
        "from dit_lora.commands.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        "    main(['train', '--help'])\n"
        "assert 'SanaPipeline' in out.getvalue() and 'Qwen3VLMoeForConditionalGeneration' in out.getvalue()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"torch imported by train --help: {done.stdout.strip()[:300]}"


def test_in_package_fills_the_standard_layout_and_a_given_field_wins():
    """``FamilyEntry.in_package``: a family in the standard layout states its factory, options, names and
    pipelines."""
    entry = FamilyEntry.in_package("pkg.fam", names=("fam", "fam_i2v"), factory=fam_spec,
                                   options={"fam": Opts, "fam_i2v": B}, pipelines=("P",))
    assert entry.factory is fam_spec and entry.catalogue == "pkg.fam"
    assert entry.options_for("fam_i2v") is B
    assert (entry.docs, entry.demo_configs, entry.recipe) == ("docs/guides/fam.md", ("fam/demo.yaml",), "fam_lora.py")
    given = FamilyEntry.in_package("pkg.fam", names=("fam",), factory=fam_spec, options=Opts,
                                   docs="docs/guides/other.md", demo_configs=("x/demo.yaml",), recipe="x_lora.py")
    assert given.options_for("fam") is Opts
    assert (given.docs, given.demo_configs, given.recipe) == ("docs/guides/other.md", ("x/demo.yaml",), "x_lora.py")
    from dit_lora.families.sana import build_spec

    built = FamilyEntry.in_package("dit_lora.families.sana", factory=build_spec, options=SanaOptions)
    assert built.build("sana").name == "sana"  # the factory is called with the name


def test_in_package_names_a_one_name_family_after_its_folder():
    """Left out, the names are the folder's name; stated, they win."""
    entry = FamilyEntry.in_package("pkg.fam", factory=fam_spec, options=Opts)
    assert entry.names == ("fam",) and entry.recipe == "fam_lora.py"
    stated = FamilyEntry.in_package("pkg.fam", names=("other",), factory=fam_spec, options=Opts)
    assert stated.names == ("other",) and stated.demo_configs == ("other/demo.yaml",)


def test_every_built_in_entry_holds_its_options_classes_and_a_function_of_its_package():
    """No ``"module:attr"`` path: the options are classes of the family's options.py, the factory a function of its
    ``__init__.py`` (which imports its spec.py in its body: go-to-definition follows it)."""
    import importlib

    from dit_lora.config.option import FamilyOptions
    from dit_lora.registry import BUILT_IN, BUILT_IN_PACKAGE

    for package in BUILT_IN:
        module = importlib.import_module(f"{BUILT_IN_PACKAGE}.{package}")
        entry = module.ENTRY
        assert callable(entry.factory) and entry.factory.__module__ == module.__name__, package
        for name in entry.names:
            options = entry.options_for(name)
            assert isinstance(options, type) and issubclass(options, FamilyOptions), (package, name)
            assert options.__module__ == f"{module.__name__}.options", (package, name)


def test_every_built_in_entry_builds_each_name_anew_refuses_another_and_names_files_that_exist():
    """The entry checks of ``tests/support/family_entries.py`` for every built-in family, from the registry (a family's
    own test may add the options classes it expects)."""
    import importlib

    from family_entries import check_entry

    from dit_lora.registry import BUILT_IN, BUILT_IN_PACKAGE

    for package in BUILT_IN:
        module = importlib.import_module(f"{BUILT_IN_PACKAGE}.{package}")
        check_entry(module, dict.fromkeys(module.ENTRY.names, "FamilySpec"))
