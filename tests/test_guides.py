"""The commands the README and the guides show are the commands that work: each one is parsed by the real parsers,
and run, on the family's tiny offline demo model, as a reader would type it.

Which commands: a fenced block right after a marker line in the markdown,

* ``<!-- test: quickstart -->`` in README.md (the same block as docs/install.md's quickstart),
* ``<!-- test: real-use -->`` in README.md: one ``dit-lora launch`` command per family, each the same as
* ``<!-- test: main-example -->`` in each family's guide (the page its registry entry names, ``FamilyEntry.docs``).

What a run changes, and only that (:func:`offline_version`): the Hub id becomes a folder the family's ``--demo``
builds (a tiny random model of the same architecture, :func:`stand_ins`: each family's ``GUIDE_STAND_INS``), the reader's own paths (images, clips,
output) become temporary folders the demo fills, the sizes become the demo config's, and the run is one step long.
Every other option is passed as written, and the run's ``train_summary.json`` must record the value the command
gives it. A command that no longer parses, an option renamed, a config file moved or a run that fails fails here.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import warm_launch
import yaml

from helpers import ROOT
from dit_lora.config.sections import SECTION_OF

README = ROOT / "README.md"
INSTALL = ROOT / "docs" / "install.md"
MARKER = re.compile(r"^<!-- test: ([a-z-]+) -->\s*$")
#: the script every command starts with (the console script ``pip install -e .`` puts beside python)
DIT_LORA = Path(sys.executable).with_name("dit-lora")



def stand_ins() -> dict[str, dict]:
    """Per Hub id a command names: the family options that make ``--demo`` build a tiny model of that architecture
    (each family's ``demo.py``), and the options to drop for a local folder (None). Each family states its own
    (``GUIDE_STAND_INS`` in ``tests/families/<package>/cases.py``): a new id in a guide needs a line there."""
    from family_cases import case

    found: dict[str, dict] = {}
    for family in guides():
        found.update(case(family, "GUIDE_STAND_INS", "tests/test_guides.py (its guide's main example)"))
    return found


#: options naming what the reader brings (their data, their output folder): the test's own folders instead
READER_PATHS = ("train_data_dir", "video_folder", "output_dir", "cache_dir")
#: options whose demo-config value replaces the command's: the demo model's sizes, the demo data's classes and the
#: rank (a published model's --rank 64 is more than the tiny model's 32-wide layers take: refused, as it should be)
DEMO_SIZES = ("resolution", "height", "width", "max_num_frames", "num_frames", "num_classes", "rank")
#: what makes a run short: one update on a few samples, no samples (each family's demo test samples and reloads; the
#: command's --validation_prompt is parsed and checked by the quick tests), no tracker
SHORT = {"demo": "true", "demo_num_images": "4", "max_train_steps": "1", "validation_inference_steps": "2",
         "report_to": "none", "validation_prompt": ""}


# ---- reading the markdown -------------------------------------------------------------------------------------------
def marked_blocks(path: Path) -> dict[str, list[str]]:
    """``{marker name: [the fenced block after each such marker]}`` of a markdown file."""
    lines, out = path.read_text().splitlines(), {}
    for i, line in enumerate(lines):
        found = MARKER.match(line)
        if found is None:
            continue
        start = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
        assert start is not None and lines[start].startswith("```"), f"{path.name}:{i + 1}: no code block after {line}"
        end = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("```"))
        out.setdefault(found.group(1), []).append("\n".join(lines[start + 1:end]))
    return out


def block_under(path: Path, heading: str) -> str:
    """The first fenced block after the line ``heading`` of a markdown file."""
    lines = path.read_text().splitlines()
    start = next(j for j in range(lines.index(heading), len(lines)) if lines[j].startswith("```"))
    end = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("```"))
    return "\n".join(lines[start + 1:end])


def commands(block: str) -> list[list[str]]:
    """The shell commands of a block as argument lists: continuation lines joined, ``# comments`` dropped, each
    ``a && b`` as two commands."""
    out: list[list[str]] = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while "&&" in words:
            at = words.index("&&")
            out.append(words[:at])
            words = words[at + 1:]
        if words:
            out.append(words)
    return out


def option_dict(args: list[str]) -> dict[str, str]:
    """``--key value`` pairs of a recipe's arguments (every recipe option takes a value)."""
    assert len(args) % 2 == 0 and all(a.startswith("--") for a in args[::2]), f"not --key value pairs: {args}"
    return {key[2:]: value for key, value in zip(args[::2], args[1::2])}


def split_launch(words: list[str]) -> tuple[list[str], str, list[str]]:
    """``dit-lora launch [launch options] recipes/X_lora.py [recipe options]`` as (launch options, script, options)."""
    assert words[:2] == ["dit-lora", "launch"], f"not a dit-lora launch command: {shlex.join(words)}"
    script = next(w for w in words if w.startswith("recipes/") and w.endswith(".py"))
    at = words.index(script)
    return words[2:at], script, words[at + 1:]


def recipe_family(script: str) -> str:
    """The family a recipe script trains by default (its registry entry's)."""
    from dit_lora.registry import available, entry_for

    names = [entry_for(n).default for n in available() if entry_for(n).recipe == Path(script).name]
    assert names, f"{script} is no family's recipe script"
    return names[0]


def guides() -> dict[str, Path]:
    """``{registry entry's default family: its guide}`` (``FamilyEntry.docs``), one per entry."""
    from dit_lora.registry import available, entry_for

    return {entry_for(n).default: ROOT / entry_for(n).docs for n in available()}


def main_example(family: str) -> list[str]:
    """The one command of a family's guide's main example."""
    page = guides()[family]
    blocks = marked_blocks(page).get("main-example", [])
    assert len(blocks) == 1, f"{page.relative_to(ROOT)}: {len(blocks)} main-example blocks, want 1"
    found = commands(blocks[0])
    assert len(found) == 1, f"{page.relative_to(ROOT)}: the main example holds {len(found)} commands, want 1"
    return found[0]


# ---- the offline version of a command -------------------------------------------------------------------------------
def offline_version(words: list[str], tmp: Path) -> tuple[list[str], dict[str, str]]:
    """``words`` as the test runs it, and the options it changed (see the module docstring)."""
    launch, script, args = split_launch(words)
    family = recipe_family(script)
    from dit_lora.registry import entry_for

    demo = yaml.safe_load((ROOT / "recipes" / "configs" / entry_for(family).demo_configs[0]).read_text())
    given = option_dict(args)
    if "config" in given:
        given = {**yaml.safe_load((ROOT / given["config"]).read_text()), **given}
    model = str(given["pretrained_model_name_or_path"])
    # a Hub id needs its stand-in; a demo config (the quickstart's) builds its own model, here in tmp
    demo_of = stand_ins()
    assert model in demo_of or given.get("demo") is True, (
        f"{model}: say in GUIDE_STAND_INS (tests/families/<package>/cases.py) which demo model stands in for it")
    changes = {"pretrained_model_name_or_path": str(tmp / "model"), **demo_of.get(model, {}), **SHORT}
    for key in READER_PATHS:
        if key in given:
            changes[key] = str(tmp / key)
    if Path(demo["train_data_dir"]).suffix:  # an annotation file (a video LLM's): the demo writes it, named as its
        # config names it, and the clips beside it
        changes["train_data_dir"] = str(tmp / "qa" / Path(demo["train_data_dir"]).name)
        changes["video_folder"] = str(tmp / "qa")
    from dit_lora.config.applies import applies_to, tagged_options

    tags = tagged_options()  # a short-run option the family never reads (a video LLM's sampler steps) is refused
    changes.update({key: None for key in SHORT if key in tags and not applies_to(tags[key], family)})
    changes.update({key: str(demo[key]) for key in DEMO_SIZES if key in demo})
    out = list(args)
    for key, value in changes.items():
        flag = f"--{key}"
        if flag in out:
            at = out.index(flag)
            out[at:at + 2] = [] if value is None else [flag, value]
        elif value is not None:
            out += [flag, value]
    return [str(DIT_LORA), "launch", *launch, script, *out], changes


def parsed(words: list[str]):
    """The run config the recipe builds from a command's options (the real parser; nothing is loaded)."""
    from dit_lora.commands.recipe import parse_run

    _, script, args = split_launch(words)
    return parse_run(args, recipe_family(script))


def option_value(cfg, key: str):
    """An option's value in a parsed config: a common option, else the family's own."""
    return cfg.option(key) if key in SECTION_OF else getattr(cfg.family_options, key)


def every_command() -> list[tuple[str, list[str]]]:
    """``(where, command)`` for every command the tests run: the quickstart's training command and each guide's
    main example (the README's real-use commands are those, :func:`test_readme_real_use_is_the_guides_examples`)."""
    quick = [c for c in commands(marked_blocks(README)["quickstart"][0]) if c[:2] == ["dit-lora", "launch"]]
    return [("README quickstart", quick[0])] + [(f"{p.relative_to(ROOT)}", main_example(f)) for f, p in guides().items()]


# ---- quick checks: the commands parse and say the same thing in every place --------------------------------------
def test_every_family_guide_has_one_main_example_for_its_recipe():
    from dit_lora.registry import entry_for

    for family in guides():
        words = main_example(family)
        assert Path(split_launch(words)[1]).name == entry_for(family).recipe, (family, words)


def test_readme_real_use_is_the_guides_examples():
    blocks = marked_blocks(README).get("real-use", [])
    assert len(blocks) == 1, "README.md: one real-use block"
    shown = commands(blocks[0])
    assert sorted(recipe_family(split_launch(c)[1]) for c in shown) == sorted(guides())
    for words in shown:
        assert words == main_example(recipe_family(split_launch(words)[1])), shlex.join(words)


def test_demo_of_holds_one_stand_in_per_registry_entry_and_no_stale_line():
    """The families' stand-ins' Hub ids are exactly the models the guides' main examples name, one per registry entry
    (its default family's catalogue), each stated by its own family: a new family's guide without one fails here
    naming it, a stale line too."""
    from family_cases import case

    from dit_lora.catalogue import by_hub_id
    from dit_lora.registry import entry_for

    for family in guides():
        named = option_dict(split_launch(main_example(family))[2])["pretrained_model_name_or_path"]
        stated = set(case(family, "GUIDE_STAND_INS", "tests/test_guides.py (its guide's main example)"))
        assert stated == {named}, f"{family}'s GUIDE_STAND_INS: state {named} (its guide's model), not {stated}"
        assert entry_for(by_hub_id(named).family).default == family, named


def test_quickstart_is_the_install_page_and_ci_command():
    readme = marked_blocks(README)["quickstart"]
    assert [block_under(INSTALL, "## Quickstart")] == readme, "docs/install.md's quickstart is the README's"
    found = commands(readme[0])
    pip, launch, tests = found
    assert pip[:2] == ["pip", "install"] and launch[:2] == ["dit-lora", "launch"]
    # the pip line: torch at the pinned version, this checkout with extras that exist, the constraints file
    torch_pin = next(w for w in pip if w.startswith("torch=="))
    assert torch_pin in (ROOT / "constraints.txt").read_text().splitlines()
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    editable = pip[pip.index("-e") + 1]
    assert re.fullmatch(r'\.(\[[\w,]+\])?', editable) and all(e in extras for e in re.findall(r"\w+", editable))
    assert (ROOT / pip[pip.index("-c") + 1]).is_file()
    # the test command is the one CI runs (.ci/run's last line)
    assert shlex.join(tests) == (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]


@pytest.mark.parametrize("where,words", every_command(), ids=lambda v: v if isinstance(v, str) else "")
def test_command_parses(where, words):
    """The real parsers accept it: accelerate's launch options (their files exist), the recipe's options; every Hub
    id is catalogued and has a stand-in demo model."""
    from accelerate.commands.launch import launch_command_parser

    from dit_lora.catalogue import by_hub_id

    launch, script, args = split_launch(words)
    assert (ROOT / script).is_file()
    launch_command_parser().parse_args([*launch, script])
    if "--config_file" in launch:
        assert (ROOT / launch[launch.index("--config_file") + 1]).is_file()
    cfg = parsed(words)
    model = cfg.model.pretrained_model_name_or_path
    if not model.startswith("."):  # a Hub id, not the quickstart's demo folder
        assert by_hub_id(model) is not None and model in stand_ins(), model


def test_offline_version_changes_only_paths_sizes_and_length(tmp_path):
    words = shlex.split("dit-lora launch recipes/cogvideox_lora.py --pretrained_model_name_or_path THUDM/CogVideoX-5b "
                        "--train_data_dir ./clips --output_dir ./out --rank 64 --height 480")
    run, changes = offline_version(words, tmp_path)
    options = option_dict(run[run.index("recipes/cogvideox_lora.py") + 1:])
    demo = yaml.safe_load((ROOT / "recipes/configs/cogvideox/demo.yaml").read_text())
    # the rank is the tiny model's, as its sizes are: 64 is more than its 32-wide layers take
    assert options["rank"] == str(demo["rank"]) != "64" and changes["rank"] == str(demo["rank"])
    assert options["height"] == "64" and options["max_train_steps"] == "1"
    assert options["pretrained_model_name_or_path"] == str(tmp_path / "model") and options["demo"] == "true"
    assert options["train_data_dir"] == str(tmp_path / "train_data_dir") and "lora_alpha" not in changes
    with pytest.raises(AssertionError, match="GUIDE_STAND_INS"):
        offline_version([*words[:4], "THUDM/CogVideoX-2b", *words[5:]], tmp_path)
    from dit_lora.core.errors import UserError

    with pytest.raises(UserError, match="--lora_rank"):  # a renamed option fails the parse, as it fails the reader
        parsed([*words, "--lora_rank", "8"])


# ---- the runs -------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("where,words", every_command(), ids=lambda v: v if isinstance(v, str) else "")
def test_command_runs(where, words, tmp_path):
    """Run the command (on the demo model, one step); it finishes, writes its adapter, and the run used every option
    the command gives that the test did not change. The launch's options are the command's: what `dit-lora launch`
    gives the training process is learned from a real launch of them."""
    run, changes = offline_version(words, tmp_path)
    launch, script, args = split_launch(["dit-lora", *run[1:]])
    # as `dit-lora launch` runs it, the process forked from a warm interpreter (tests/support/warm_launch.py)
    done = warm_launch.launch(launch, ROOT / script, args, env={"HF_HUB_OFFLINE": "1"}, timeout=240)
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"{where}: {shlex.join(run)}\nexit {done.returncode}\n{tail}"
    out = Path(changes.get("output_dir") or option_value(parsed(words), "output_dir"))
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 1, tail
    assert Path(summary["adapter"]).is_file()
    cfg = parsed(words)
    for key in option_dict(split_launch(words)[2]):
        if key not in changes and key != "config":
            assert summary["config"][key] == option_value(cfg, key), key
