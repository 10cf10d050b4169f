"""The conformance suite's runs: each family name's offline demo trained once, and the checks every family keeps.

A family name is checked by registering it: :func:`demo_names` reads each registry entry's ``demo_configs`` (the
``family:`` each one trains), and a module-scoped :func:`train_demo` trains that demo in process once (a few steps,
a guard drill, under the host-sync audit), kept with what the checks read (the summary, the trainable weights after
every update, the trained model, the audit). One resume per name from the run's own checkpoint
(:func:`stopped_and_resumed`) follows it on demand. ``tests/conformance/test_conformance.py`` runs
:class:`ConformanceChecks` over every built-in name; a family kept outside the package (``tests/toy_family``)
subclasses it in its own folder with a fixture that registers it.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

from helpers import ROOT

CONFIGS = ROOT / "recipes" / "configs"
#: the reference run: 3 updates, a checkpoint after each (all kept), a NaN loss at update 2 (the guard drill). The
#: fewest that keep every check: an update before the drill (lora_B leaves zero) and one after it (training goes on),
#: and a resume from checkpoint-1 that replays the drill before its last update
STEPS, CHECKPOINT, DRILL = 3, 1, 2
#: the reference run's data: the demo set's first BATCHES batches (``--max_train_samples``), not all of it (up to 32
#: samples, most of which 3 updates never reach): the latent cache encodes what the run trains on. Two batches an
#: epoch, so the resume from checkpoint-1 starts mid-epoch (its position in the epoch restored) and goes on into the
#: next epoch's order (restored from the seed): one batch an epoch would leave both unchecked
BATCHES = 2
#: the plan's error against a measured CPU peak (tests/plan/test_estimate.py holds Sana to the same)
PLAN_TOLERANCE = 0.15


def upstream_sync(name: str) -> str | None:
    """Where the training step of ``name`` syncs inside a library's own code (upstream): the file the first sync
    comes from, as its family states it (``UPSTREAM_SYNCS`` in its cases.py), None for a step that never syncs. Such
    a name's reference run trains without the audit, and the host-sync check shows where the sync is."""
    from family_cases import case

    return case(name, "UPSTREAM_SYNCS", "tests/conformance", per_name=True, default=None)


def demo_configs() -> dict[str, Path]:
    """Every registered name that has a demo config of its own -> that config (the registry entries'
    ``demo_configs``, relative to ``recipes/configs/`` or absolute for a family kept outside the package)."""
    from dit_lora.registry import entries

    found = {}
    for entry in entries():
        for config in entry.demo_configs:
            path = CONFIGS / config
            found[yaml.safe_load(path.read_text())["family"]] = path
    return found


def demo_names() -> list[str]:
    """The names the suite trains, sorted."""
    return sorted(demo_configs())


#: each name's demo folder in this process (its tiny model, data and latent cache): see :func:`demo_root`
_ROOTS: dict[str, Path] = {}


def demo_root(name: str, tmp_path_factory) -> Path:
    """``name``'s demo folder, one per process for every run of that name: the reference run, its resume and the
    lever runs (conformance_levers.py) each write their own output folder in it and share the tiny model, the data
    and the latent cache (built by whichever runs first: ``--demo`` builds are idempotent, a cached entry is
    read back by every later run of the same cache identity), so each name's model and cache are built once, not
    once per module."""
    if name not in _ROOTS:
        _ROOTS[name] = tmp_path_factory.mktemp(f"conformance-{name}")
    return _ROOTS[name]


def name_params(names) -> list:
    """``names`` as parameters, each name's checks in one pytest-xdist group (one worker trains it once)."""
    return [pytest.param(name, marks=pytest.mark.xdist_group(f"conformance-{name}")) for name in names]


@dataclass
class DemoRun:
    """One name's reference run and what its checks read."""

    name: str
    config: Path
    root: Path  # the demo folder: model, data and latent cache, as the config names them under .dit_lora_demo/
    out: Path
    summary: dict
    states: dict[int, dict[str, torch.Tensor]]  # the trainable weights after each update
    model: torch.nn.Module  # the trained model, adapters live
    audit: Any  # the run's SyncAudit (None: trained without, upstream_sync)
    resumed: dict = field(default_factory=dict)  # stopped_and_resumed's summary and folder, once made

    def args(self, out: Path | None = None, **extra) -> list[str]:
        """The run's flags (``out``: another output folder; ``extra``: more flags)."""
        return demo_args(self.name, self.config, self.root, out or self.out, **extra)

    def cfg(self):
        """The run's parsed config."""
        from dit_lora.config import parse_config

        return parse_config(self.args())

    def path(self, key: str) -> Path:
        """A folder the demo config names (``pretrained_model_name_or_path``, ``train_data_dir``), under
        :attr:`root`."""
        return rebase(yaml.safe_load(self.config.read_text())[key], self.root)


def rebase(value: str, root: Path) -> Path:
    """A demo config's ``.dit_lora_demo/...`` path under ``root``."""
    return root / Path(value).relative_to(".dit_lora_demo")


def demo_args(name: str, config: Path, root: Path, out: Path, **extra) -> list[str]:
    """The demo config's own flags, its folders under ``root``, shortened to the reference run (no samples: they are
    not steps; the card check runs the card's snippet instead)."""
    values = yaml.safe_load(config.read_text())
    args = ["--config", str(config), "--family", name, "--output_dir", str(out),
            "--pretrained_model_name_or_path", str(rebase(values["pretrained_model_name_or_path"], root)),
            "--train_data_dir", str(rebase(values["train_data_dir"], root)),
            "--max_train_steps", str(STEPS), "--checkpointing_steps", str(CHECKPOINT),
            "--checkpoints_total_limit", str(STEPS), "--report_to", "none", "--validation_steps", "1000",
            "--validation_prompt", "", "--skip_doctor", "true", "--inject_faults", f"nan_loss@{DRILL}"]
    micro_batches = values["train_batch_size"] * values.get("gradient_accumulation_steps", 1)
    args += ["--max_train_samples", str(BATCHES * micro_batches)]
    if "cache_dir" in values:  # a video LLM reads no latent cache
        args += ["--cache_dir", str(root / "cache")]
    for key, value in extra.items():
        args += [f"--{key}", str(value)]
    return args


def train(args: list[str], on_step=None) -> dict:
    """``train()`` in process on the parsed ``args``; its summary."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train as train_loop

    AcceleratorState._reset_state(True)
    try:
        return train_loop(parse_config(args), on_step=on_step)
    finally:
        AcceleratorState._reset_state(True)


def train_demo(name: str, root: Path) -> DemoRun:
    """``name``'s demo trained once in process: the model and data built offline by ``--demo``, STEPS updates with a
    NaN loss at DRILL, every step under the host-sync audit (``DIT_LORA_SYNC_DEBUG``) unless it syncs upstream
    (:func:`upstream_sync`).
    Without the memory plan (``--ignore_memory_plan``): a plan traces the whole step once more, and the one the plan
    check reads is the resume's, which starts as a user's run does (:func:`stopped_and_resumed`)."""
    from dit_lora.training import drills
    from dit_lora.training.sync_audit import SyncAudit

    config = demo_configs()[name]
    states: dict[int, dict[str, torch.Tensor]] = {}
    held: dict[str, Any] = {}
    audits: list = []

    def record(step, model, optimizer):
        states[step] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        held["model"] = model

    class Recorded(SyncAudit):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            audits.append(self)

    out = root / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(drills, "SyncAudit", Recorded)
        if upstream_sync(name) is None:
            patch.setenv("DIT_LORA_SYNC_DEBUG", "1")
        # unplanned: the plan's start check is the resume's (stopped_and_resumed), the run the plan check measures
        summary = train(demo_args(name, config, root, out, ignore_memory_plan="true"), on_step=record)
    audit = audits[0] if upstream_sync(name) is None else None
    return DemoRun(name, config, root, out, summary, states, held["model"], audit)


def resume_from_its_checkpoint(run: DemoRun, out: Path) -> dict:
    """``run`` again from its own checkpoint-CHECKPOINT, copied alone into ``out`` (what a run killed after writing
    it leaves: the checkpoint is whole, its completion marker listing every file), resumed with
    ``--resume_from_checkpoint latest`` under ``run``'s own flags: ``{"summary", "out"}``. The resumed run's peak
    memory is measured from its start (the process's high-water mark reset first), for the plan check.

    One run of STEPS - CHECKPOINT updates, not a killed run and its resume: what a name adds to a resume is its own
    state coming back bit for bit (its checkpoint's contents, its data order and noise); the kill itself (a crash
    point mid-update, whatever the dying run left beside its checkpoint) is the loop's, the same for every name, and
    is killed for real in tests/e2e/test_resume.py (each crash point) and the families' own e2e kills."""
    import shutil

    shutil.copytree(run.out / f"checkpoint-{CHECKPOINT}", out / f"checkpoint-{CHECKPOINT}")
    reset_peak_memory()
    return {"summary": train(run.args(out, resume_from_checkpoint="latest")), "out": out}


def stopped_and_resumed(run: DemoRun) -> dict:
    """The reference run resumed from its checkpoint-CHECKPOINT (:func:`resume_from_its_checkpoint`, made once per
    name, in ``<root>/resumed-reference``): ``{"summary", "out"}``."""
    if not run.resumed:
        run.resumed = resume_from_its_checkpoint(run, run.root / "resumed-reference")
    return run.resumed


def reset_peak_memory() -> None:
    """Reset this process's resident high-water mark (``VmHWM``, what a CPU run reports as its peak) to its resident
    size now, so the next run's peak is its own rather than an earlier test's (Linux 4.0+: ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


# ---- the adapter reloaded ----------------------------------------------------------------------------------------
def adapter_file(out: Path) -> Path:
    """The run's exported adapter file (diffusers' ``pytorch_lora_weights.safetensors`` or PEFT's)."""
    files = [out / "adapter_model.safetensors", out / "pytorch_lora_weights.safetensors"]
    (found,) = [f for f in files if f.is_file()]  # exactly one format: the other is never left beside it
    return found


def saved_lora_config(out: Path) -> dict:
    """The saved adapter's LoRA config: PEFT's ``adapter_config.json``, else diffusers' safetensors metadata."""
    if (out / "adapter_config.json").is_file():
        return json.loads((out / "adapter_config.json").read_text())
    with safe_open(str(adapter_file(out)), framework="pt") as f:
        packed = json.loads(f.metadata()["lora_adapter_metadata"])
    prefixes = {key.split(".", 1)[0] for key in packed}
    assert len(prefixes) == 1, prefixes  # one model's adapter (the transformer's)
    return {key.split(".", 1)[1]: value for key, value in packed.items()}


def load_with_peft(reloaded: torch.nn.Module, out: Path) -> torch.nn.Module:
    """The adapter of ``out`` put by PEFT's own code (``inject_adapter_in_model`` with the saved config,
    ``set_peft_model_state_dict``) on a copy of ``reloaded`` with its adapter layers taken off: the model as the stock
    loader built it (trained backbone weights included), every saved tensor landing."""
    from diffusers.utils.peft_utils import recurse_remove_peft_layers
    from peft import LoraConfig, inject_adapter_in_model
    from peft.utils import set_peft_model_state_dict

    base = recurse_remove_peft_layers(copy.deepcopy(reloaded))
    assert not any("lora_" in n for n, _ in base.named_parameters())
    config = {k: v for k, v in saved_lora_config(out).items() if k in LoraConfig.__dataclass_fields__}
    model = inject_adapter_in_model(LoraConfig(**config), base)
    saved = load_file(str(adapter_file(out)))
    state = {re.sub(r"^(base_model\.model\.|transformer\.)", "", k): v for k, v in saved.items()}
    result = set_peft_model_state_dict(model, state)
    assert not result.unexpected_keys, result.unexpected_keys[:3]
    return model


def consumer_model(pipe) -> torch.nn.Module:
    """The model an adapter went into: a pipeline's transformer, or a video LLM's model."""
    return getattr(pipe, "transformer", None) or getattr(pipe, "model", None) or pipe


def adapted_layers_match(trained: torch.nn.Module, reloaded: torch.nn.Module) -> int:
    """Each adapted Linear of ``trained`` and the layer of the same name (suffix) in ``reloaded`` give the same output
    on a random input, the adapter live at its trained strength; returns how many layers the training changed."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = {n: m for n, m in reloaded.named_modules() if isinstance(m, BaseTunerLayer)}
    compared = changed = 0
    g = torch.Generator().manual_seed(0)
    for name, layer in trained.named_modules():
        if not isinstance(layer, BaseTunerLayer) or not isinstance(layer.get_base_layer(), torch.nn.Linear):
            continue
        (other,) = [m for n, m in layers.items() if n == name or n.endswith("." + name) or name.endswith("." + n)]
        base = layer.get_base_layer()
        x = torch.randn(3, base.in_features, generator=g).to(base.weight.dtype)
        low = base.weight.dtype in (torch.bfloat16, torch.float16)  # fp32 adapters on a low-precision base: as trained
        with torch.no_grad(), torch.autocast("cpu", dtype=base.weight.dtype, enabled=low):
            want, got, plain = layer.eval()(x).float(), other.eval()(x).float(), base(x).float()
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4 * want.abs().max().item())
        compared += 1
        changed += bool((want - plain).abs().max() > 0)
    assert compared, "no adapted Linear layer found in the trained model"
    return changed


def same_tensors(a: dict, b: dict) -> bool:
    """Equal keys, each tensor bitwise equal."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

