"""config/optimizers.py: the optimizer table owns every fact about each optimizer, and the parser, the plan, FSDP2's
checks and the builders read it (a new entry reaches all of them; no other module names an optimizer)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import dit_lora
from dit_lora.config import optimizers
from dit_lora.config.optimizers import OptimizerNames
from dit_lora.core.errors import UserError

#: the table's own modules (the entries, their state counts)
TABLE_MODULES = ("config/optimizers.py", "config/optimizer_state.py")
#: the issue's bound: optimizer names in at most this many modules outside the table
MOST_MODULES_NAMING = 2
BASE = ["--family", "sana", "--pretrained_model_name_or_path", "me/model", "--train_data_dir", "/data"]


def _training(**changes):
    values = dict(optimizer="adamw", use_8bit_adam=False, learning_rate=1e-4, mixed_precision="bf16",
                  adafactor_beta1=None)
    return SimpleNamespace(**{**values, **changes})


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, kinds) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def modules_naming_optimizers() -> dict[str, list[str]]:
    """Per module of dit_lora outside the table, its strings (docstrings aside) that name an optimizer: one that is an
    entry's name or alias, or says ``--optimizer NAME`` or `` `NAME` ``."""
    names = {entry.name for entry in optimizers.offered()} | {a for entry in optimizers.TABLE for a in entry.aliases}
    alternatives = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
    said = re.compile(rf"--optimizer ({alternatives})(?![\w-])|`({alternatives})`")
    package = Path(dit_lora.__file__).parent
    found = {}
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        hits = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and (node.value in names or said.search(node.value))]
        if hits and module not in TABLE_MODULES:
            found[module] = hits
    return found


def test_optimizer_names_appear_in_at_most_two_modules_outside_the_table():
    found = modules_naming_optimizers()
    assert len(found) <= MOST_MODULES_NAMING, found


def test_the_scan_finds_a_module_naming_an_optimizer(monkeypatch, tmp_path):
    """The scan above can fail: a module comparing --optimizer with a name, or saying it, is found."""
    (tmp_path / "named.py").write_text('"""Docstrings may say --optimizer prodigy."""\nA = x == "came"\n'
                                       'B = f"use --optimizer {y} or --optimizer adamw4bit"\n')
    (tmp_path / "plain.py").write_text('"""--optimizer prodigy"""\nC = "it came from `general`"\n')
    monkeypatch.setattr(dit_lora, "__file__", str(tmp_path / "__init__.py"))
    assert modules_naming_optimizers() == {"named.py": ["came", " or --optimizer adamw4bit"]}


def test_the_choices_are_the_offered_entries_in_the_tables_order():
    assert list(OptimizerNames()) == ["adamw", "prodigy", "adafactor", "came", "adamw8bit", "adamw4bit"]
    assert list(OptimizerNames()) == [entry.name for entry in optimizers.TABLE if entry.offered]
    assert not optimizers.BITSANDBYTES_ADAMW8BIT.offered and optimizers.BITSANDBYTES_ADAMW8BIT.flag == "--use_8bit_adam"
    assert optimizers.DEFAULT == "adamw" and optimizers.named("came") is optimizers.CAME


def test_the_help_says_every_offered_optimizer():
    for entry in optimizers.offered():
        assert f"`{entry.name}`" in optimizers.OPTIMIZER_HELP, entry.name
    assert "--optimizer adamw8bit" in optimizers.USE_8BIT_ADAM_HELP


def test_the_run_builds_bitsandbytes_for_adamw_with_the_8bit_flag_only():
    assert optimizers.chosen("adamw", True) is optimizers.BITSANDBYTES_ADAMW8BIT
    assert optimizers.chosen("adamw", False) is optimizers.ADAMW
    assert optimizers.chosen("prodigy", True) is optimizers.PRODIGY  # refused by the parser: never both
    assert optimizers.in_use(_training(optimizer="came", use_8bit_adam=True)) == (
        optimizers.BITSANDBYTES_ADAMW8BIT, optimizers.CAME)
    with pytest.raises(UserError, match="--optimizer sgd is not one of dit-lora's optimizers: adamw, prodigy"):
        optimizers.named("sgd")


@pytest.mark.parametrize("optimizer, rate, said", [
    ("prodigy", 1e-3, "trains at 0.001 of the step it finds"),  # the pair
    ("prodigy", 1.0, None), ("prodigy", 0.5, None),
    ("adamw", 1.0, "that is Prodigy's scale"), ("came", 0.3, "that is Prodigy's scale"),
    ("adamw8bit", 0.1, "that is Prodigy's scale"), ("adamw", 1e-4, None), ("adafactor", 1e-3, None),
])
def test_a_learning_rate_on_the_wrong_scale_for_its_optimizer_is_said(optimizer, rate, said):
    warning = optimizers.learning_rate_warning(_training(optimizer=optimizer, learning_rate=rate))
    assert (warning is None) if said is None else (said in warning and f"--optimizer {optimizer}" in warning)


@pytest.mark.parametrize("entry", optimizers.offered(), ids=lambda entry: entry.name)
def test_the_8bit_flag_and_fp16_go_with_the_optimizers_that_take_them(entry):
    """--use_8bit_adam is AdamW's; fp16's gradient scaler steps on the host, so an optimizer the guard skips on the
    device is refused with it (AdamW's fused kernel takes the scaler)."""
    check = optimizers.check_options
    if entry is optimizers.ADAMW:
        check(_training(optimizer=entry.name, use_8bit_adam=True, mixed_precision="fp16"), lambda name: False)
        return
    with pytest.raises(UserError, match=f"--use_8bit_adam and --optimizer {entry.name} ask for two optimizers"):
        check(_training(optimizer=entry.name, use_8bit_adam=True), lambda name: False)
    with pytest.raises(UserError, match=f"which {re.escape(entry.title)}'s device-side skip does not go through"):
        check(_training(optimizer=entry.name, mixed_precision="fp16"), lambda name: False)


def test_an_optimizers_own_and_unread_options_are_refused_naming_it():
    given = {"prodigy_beta3", "adam_epsilon"}.__contains__
    with pytest.raises(UserError, match=r"^--prodigy_beta3 sets Prodigy, but the optimizer is came, which never reads "
                                        r"it. Add --optimizer prodigy, or drop the option.$"):
        optimizers.check_options(_training(optimizer="came"), given)
    with pytest.raises(UserError, match=r"^--adam_epsilon with --optimizer came: CAME has no Adam epsilon"):
        optimizers.check_options(_training(optimizer="came"), {"adam_epsilon"}.__contains__)
    optimizers.check_options(_training(optimizer="prodigy"), given)  # Prodigy reads both
    with pytest.raises(UserError, match="Drop --use_8bit_adam: torchao's 8-bit AdamW is the 8-bit AdamW the guard"):
        optimizers.check_options(_training(optimizer="adamw8bit", use_8bit_adam=True), lambda name: False)
    # the other optimizers are told where the 8-bit AdamW is (it once named the optimizer they had given)
    with pytest.raises(UserError, match=r"Drop --use_8bit_adam to train with Prodigy, or --optimizer adamw8bit for the "
                                        r"8-bit AdamW.$"):
        optimizers.check_options(_training(optimizer="prodigy", use_8bit_adam=True), lambda name: False)


def test_a_missing_package_is_one_paragraph_naming_the_flag_that_needs_it(monkeypatch):
    real = builtins.__import__

    def without_quant(name, *args, **kwargs):
        if name.startswith(("torchao", "bitsandbytes")):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_quant)
    optimizers.check_packages(_training(optimizer="prodigy"))  # nothing to import
    with pytest.raises(UserError, match=r"^--optimizer adamw4bit needs torchao's low-bit AdamW \(ImportError: No "
                                        r"module named 'torchao.optim'\). Install the `quant` extra"):
        optimizers.check_packages(_training(optimizer="adamw4bit"))
    with pytest.raises(UserError, match=r"^--use_8bit_adam needs bitsandbytes on a CUDA GPU \(ImportError: .*drop "
                                        r"--use_8bit_adam.$"):
        optimizers.check_packages(_training(use_8bit_adam=True))
    text = optimizers.ADAMW8BIT.package.unimportable_message("--optimizer adamw8bit", ImportError("gone"))
    assert text.startswith("--optimizer adamw8bit could not import torchao (gone). Install it with `pip install")


@pytest.mark.parametrize("name, advice", [
    ("AdamWScheduleFree", "--optimizer adamw with --lr_scheduler cosine"),
    ("adamw_schedulefree", "Python numbers"),
    ("Lion8bit", "--optimizer adamw8bit / adamw4bit"),
    ("adamw_bf16", "fp32 LoRA masters"),
    ("Adam", "--adam_weight_decay 0"),
    ("PagedAdamW8bit", "--use_8bit_adam"),
    ("DAdaptAdam", "--optimizer prodigy"),
    ("PagedAdamW", "adamw8bit / adamw4bit"),
    ("adamw_bnb_8bit", "--use_8bit_adam"),
])
def test_a_peers_optimizer_dit_lora_does_not_offer_is_one_paragraph_saying_what_to_use(name, advice):
    with pytest.raises(UserError, match=re.escape(advice)) as caught:
        OptimizerNames().canonical(name)
    assert f"--optimizer {name} is not offered" in str(caught.value) and "adamw, prodigy" in str(caught.value)


def test_the_peers_spellings_of_offered_optimizers_are_read_as_them():
    names = OptimizerNames()
    assert [names.canonical(n) for n in ("AdamW", "ao-adamw4bit", "adamw_torch_fused", "CAME", "adamw_8bit",
                                          "came_pytorch.CAME", "nonsense")] == [
        "adamw", "adamw4bit", "adamw", "came", "adamw8bit", "came", "nonsense"]


def test_the_peers_spellings_read_as_an_entrys_name():
    names = OptimizerNames()
    for entry in optimizers.offered():
        assert names.canonical(entry.name.upper()) == entry.name
        for alias in entry.aliases:
            assert alias == alias.lower() and names.canonical(alias) == entry.name


def test_a_new_entry_reaches_the_choices_checks_plan_report_builder_and_fsdp2(monkeypatch):
    """One entry added to the table (and its builder to the builders) is offered, checked, planned, reported, built
    and refused under FSDP2 as its fields say, with no other change."""
    import torch

    from dit_lora.config import TrainConfig, parse_config
    from dit_lora.plan import estimate, report
    from dit_lora.training import fsdp2, optim

    fake = dataclasses.replace(
        optimizers.CAME, name="fake", title="Fake", plan_label="Fake, fp8", aliases=("fake-peer",),
        state_bytes=lambda shapes, training: 3 * sum(math.prod(shape) for shape in shapes),
        fsdp2_refusal="its state is not sharded: use adamw", own_options=(), unread_adam_options=())
    monkeypatch.setattr(optimizers, "TABLE", (*optimizers.TABLE, fake))
    built = []
    monkeypatch.setitem(optim.BUILDERS, fake, lambda entry, training, groups, device: built.append(entry) or
                        torch.optim.SGD(groups, lr=training.learning_rate))

    assert list(OptimizerNames())[-1] == "fake" and OptimizerNames().canonical("Fake-Peer") == "fake"
    assert parse_config([*BASE, "--optimizer", "FAKE"]).training.optimizer == "fake"
    with pytest.raises(UserError, match="--came_beta3 sets CAME, but the optimizer is fake"):
        parse_config([*BASE, "--optimizer", "fake", "--came_beta3", "0.99"])

    cfg = TrainConfig(optimizer="fake")
    model = torch.nn.Linear(4, 3)
    assert estimate._trainable_fields(cfg.training, cfg.guards, model, "cuda", 1, "ddp")["optimizer_bytes"] == 3 * (4 * 3 + 3)
    assert report._optimizer_label(SimpleNamespace(optimizer="fake", eight_bit_adam=False)) == "Fake, fp8"

    made, skip = optim.make_optimizer(cfg.training, [{"params": list(model.parameters())}], torch.device("cpu"))
    assert isinstance(made, torch.optim.SGD) and skip is True and built == [fake]
    with pytest.raises(UserError, match=r"--optimizer fake \(its state is not sharded: use adamw\)"):
        fsdp2.check_options(cfg)
