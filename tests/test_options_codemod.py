"""``tools/options_codemod.py``: flat option reads on a run config written through their section, every other byte
kept, rerunnable, and what it cannot decide reported."""

from __future__ import annotations

import importlib.util
import sys

from helpers import ROOT

_spec = importlib.util.spec_from_file_location("_options_codemod", ROOT / "tools" / "options_codemod.py")
codemod = sys.modules["_options_codemod"] = importlib.util.module_from_spec(_spec)  # its dataclasses look it up
_spec.loader.exec_module(codemod)
SECTIONS = codemod.section_of()

BEFORE = '''\
def train(cfg, args):
    # « rank » stays in comments: cfg.rank
    lr = cfg.learning_rate * 2  # noqa
    if cfg.lora.rank and args.rank:  # already through its section; argparse's namespace
        return self_cfg(cfg).rank
    return run.cfg.output_dir, cfg.family_options.x, replace(cfg, rank=4).rank


def built(tmp):
    c = TrainConfig.for_family("sana", rank=4)
    chosen = choose_defaults(c, spec)
    return c.rank, chosen.config.resolution, "é" + c.seed.__str__()


def stand_in():
    cfg = SimpleNamespace(rank=4)
    return cfg.rank, getattr(run.cfg, "seed"), config.rank
'''

AFTER = '''\
def train(cfg, args):
    # « rank » stays in comments: cfg.rank
    lr = cfg.training.learning_rate * 2  # noqa
    if cfg.lora.rank and args.rank:  # already through its section; argparse's namespace
        return self_cfg(cfg).rank
    return run.cfg.training.output_dir, cfg.family_options.x, replace(cfg, rank=4).lora.rank


def built(tmp):
    c = TrainConfig.for_family("sana", rank=4)
    chosen = choose_defaults(c, spec)
    return c.lora.rank, chosen.config.data.resolution, "é" + c.training.seed.__str__()


def stand_in():
    cfg = SimpleNamespace(rank=4)
    return cfg.rank, getattr(run.cfg, "seed"), config.rank
'''


def test_flat_reads_on_a_config_go_through_their_section_and_nothing_else_changes():
    assert SECTIONS["output_dir"] == SECTIONS["seed"] == "training"  # the sections AFTER assumes
    new, found = codemod.rewrite(BEFORE, SECTIONS)
    assert new == AFTER
    undecided = [what for _, what in found.undecided]
    assert undecided == [
        "cfg.rank (not known to be a run config)",
        "getattr(run.cfg, 'seed') (an option read by name)",
        "config.rank (not known to be a run config)",
    ]


def test_a_second_run_changes_nothing():
    once, _ = codemod.rewrite(BEFORE, SECTIONS)
    twice, found = codemod.rewrite(once, SECTIONS)
    assert twice == once and not found.inserts


def test_check_mode_writes_nothing_and_says_a_file_would_change(tmp_path, capsys):
    path = tmp_path / "reads.py"
    path.write_text(BEFORE, encoding="utf-8")
    assert codemod.main(["--check", str(path)]) == 1
    assert path.read_text(encoding="utf-8") == BEFORE
    assert "would rewrite 6 flat option reads in 1 files; 3 left undecided" in capsys.readouterr().out
    assert codemod.main([str(path)]) == 0 and path.read_text(encoding="utf-8") == AFTER
