"""``FamilyEntry`` (``dit_lora/registry.py``): what a family package declares, checked when it is made."""

from __future__ import annotations

import dataclasses

import pytest

from dit_lora.registry import FamilyEntry, resolve


def test_an_entry_is_immutable_and_its_first_name_is_the_recipe_default():
    entry = FamilyEntry(names=("one", "two"), factory="dit_lora.families.sana.spec:sana_spec")
    assert entry.default == "one" and entry.recipe_script == "recipes/one_lora.py"
    assert FamilyEntry(names=("x",), factory=str, recipe="other_lora.py").recipe_script == "recipes/other_lora.py"
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.names = ("three",)


@pytest.mark.parametrize("names", [(), "sana", ("a", "a"), ("a", "")])
def test_names_must_be_a_tuple_of_distinct_names(names):
    with pytest.raises(ValueError, match="FamilyEntry.names"):
        FamilyEntry(names=names, factory=str)


def test_options_for_each_name():
    shared = FamilyEntry(names=("a", "b"), factory=str, options="pkg.options:Opts")
    assert shared.options_for("a") == shared.options_for("b") == "pkg.options:Opts"
    split = FamilyEntry(names=("a", "b"), factory=str, options={"b": "pkg.options:B"})
    assert split.options_for("a") is None and split.options_for("b") == "pkg.options:B"
    with pytest.raises(TypeError):  # the mapping is read-only too
        split.options["a"] = "pkg.options:A"
    with pytest.raises(ValueError, match="not among its names"):
        FamilyEntry(names=("a",), factory=str, options={"c": "pkg.options:C"})


def test_build_calls_the_factory_with_the_name_and_refuses_another():
    made = []
    entry = FamilyEntry(names=("a", "b"), factory=lambda name: made.append(name) or name.upper())
    assert entry.build("b") == "B" and made == ["b"]
    with pytest.raises(KeyError, match="'c' is not a name of this entry"):
        entry.build("c")


def test_resolve_imports_a_module_attribute_path_on_use():
    from dit_lora.families.sana.catalogue import REFUSED

    assert resolve("dit_lora.families.sana.catalogue:REFUSED") is REFUSED
    assert resolve("dit_lora.registry:FamilyEntry.recipe_script") is FamilyEntry.recipe_script
    assert resolve(len) is len  # a callable is used as it is
    with pytest.raises(ValueError, match="module:attribute"):
        resolve("dit_lora.families.sana")


def test_pipelines_for_each_name():
    one = FamilyEntry(names=("a", "b"), factory="x:y", pipelines=("APipeline", "AOtherPipeline"))
    assert one.pipelines_for("a") == one.pipelines_for("b") == ("APipeline", "AOtherPipeline")
    per_name = FamilyEntry(names=("a", "b"), factory="x:y", pipelines={"a": ["APipeline"], "b": ("BPipeline",)})
    assert per_name.pipelines_for("a") == ("APipeline",) and per_name.pipelines_for("b") == ("BPipeline",)
    assert FamilyEntry(names=("a",), factory="x:y").pipelines_for("a") == ()  # undeclared: the spec says


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
    """``FamilyEntry.in_package``: a family in the standard layout states names, spec, options and pipelines."""
    entry = FamilyEntry.in_package("pkg.fam", names=("fam", "fam_i2v"), spec="fam_spec",
                                   options={"fam": "FamOptions", "fam_i2v": "FamI2VOptions"}, pipelines=("P",))
    assert entry.factory == "pkg.fam.spec:fam_spec" and entry.catalogue == "pkg.fam"
    assert entry.options_for("fam_i2v") == "pkg.fam.options:FamI2VOptions"
    assert (entry.docs, entry.demo_configs, entry.recipe) == ("docs/guides/fam.md", ("fam/demo.yaml",), "fam_lora.py")
    given = FamilyEntry.in_package("pkg.fam", names=("fam",), spec="fam_spec", options="FamOptions",
                                   docs="docs/guides/other.md", demo_configs=("x/demo.yaml",), recipe="x_lora.py")
    assert given.options_for("fam") == "pkg.fam.options:FamOptions"
    assert (given.docs, given.demo_configs, given.recipe) == ("docs/guides/other.md", ("x/demo.yaml",), "x_lora.py")
    built = FamilyEntry.in_package("dit_lora.families.sana", names=("sana",), spec="sana_spec", options="SanaOptions")
    assert built.build("sana").name == "sana"  # the spec function is called with the name


def test_in_package_names_a_one_name_family_and_its_spec_function_after_its_folder():
    """Left out, the names are the folder's name and the spec function is ``<folder>_spec``; stated, they win."""
    entry = FamilyEntry.in_package("pkg.fam", options="FamOptions")
    assert entry.names == ("fam",) and entry.factory == "pkg.fam.spec:fam_spec" and entry.recipe == "fam_lora.py"
    stated = FamilyEntry.in_package("pkg.fam", names=("other",), spec="build", options="FamOptions")
    assert stated.names == ("other",) and stated.factory == "pkg.fam.spec:build"
    assert stated.demo_configs == ("other/demo.yaml",)
