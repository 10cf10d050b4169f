"""The conformance suite's lever checks: a quantized base (nf4) and FSDP2, for every name whose family declares them.

Which names take them comes from what the family declares in its spec (no new registry field: the spec already holds
the facts each lever reads, and a test checks the lever refuses nothing the declaration admits):

- **nf4 base**: the spec has a precision policy (``spec.precision``, the ``Precision`` capability: the dtypes of every
  component and the modules ``--quantize_base`` leaves alone, ``quantize_skip_modules``). Without one the loader has
  no list of what to keep out of quantization, so the name is not trained on a quantized base here.
- **FSDP2**: the spec names its lists of repeated blocks (``spec.info.block_lists``): the units ``training/fsdp2.py``
  shards, each one gathered alone. A name without block lists has nothing FSDP2 would shard block by block.

Each name's demo folder (its tiny model, data and latent cache) is the reference run's (conformance.demo_root: one per
worker and name; :func:`demo_folder` builds it by the spec's own ``prepare_demo`` where the reference run has not) and
shared by both levers. One nf4 run per name (:func:`train_quantized`, the reference
run's STEPS updates, NaN drill and checkpoints) is read by the drill and reload checks, and resumed from its own
checkpoint by the resume check (:func:`resume_from_its_checkpoint`); one 2-process gloo
launch per name (:func:`launch_fsdp2`) by the FSDP2 checks.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conformance import (CHECKPOINT, DRILL, STEPS, DemoRun, adapter_file, consumer_model, demo_args, demo_configs,
                         demo_names, demo_root, resume_from_its_checkpoint, same_tensors, train)
from helpers import ROOT

#: the nf4 run's flags on top of the reference run's: one sample a micro-batch (what the checks read does not depend
#: on the batch), no plan (the reference run's check)
NF4 = {"quantize_base": "nf4", "train_batch_size": "1", "ignore_memory_plan": "true"}
#: the FSDP2 launch: 3 updates of one sample a process, a NaN gradient on rank 1 only at update 2. Two samples, one
#: a process (each update an epoch of them), not the demo's whole data set: fp32 text is another cache namespace than
#: the reference run's bf16 one, so the launch encodes what it keeps, and what it checks (every block sharded, one
#: rank's NaN skipping the update on both, one finite adapter) does not depend on how many samples an epoch holds
FSDP2 = {"max_train_steps": "3", "train_batch_size": "1", "gradient_accumulation_steps": "1", "mixed_precision": "no",
         "checkpointing_steps": "0", "inject_faults": "nan_grad@2:rank1", "ignore_memory_plan": "true",
         "max_train_samples": "2"}

_FOLDERS: dict[str, Path] = {}


def quantized_names() -> list[str]:
    """Names with a demo config whose spec declares a precision policy (what ``--quantize_base`` leaves alone)."""
    from dit_lora.registry import get_spec

    return [name for name in demo_names() if get_spec(name).precision is not None]


def fsdp2_names() -> list[str]:
    """Names with a demo config whose spec names its lists of repeated blocks (FSDP2's sharding units)."""
    from dit_lora.registry import get_spec

    return [name for name in demo_names() if get_spec(name).info.block_lists]


def with_flags(args: list[str], **flags) -> list[str]:
    """``args`` with each ``--flag`` of ``flags`` set to its value: replaced where present, else added."""
    out = list(args)
    for key, value in flags.items():
        flag = f"--{key}"
        if flag in out:
            out[out.index(flag) + 1] = str(value)
        else:
            out += [flag, str(value)]
    return out


def demo_folder(name: str, tmp_path_factory) -> Path:
    """``name``'s demo folder (conformance.demo_root: the reference run's, when it ran first in this process), its
    model and data built offline by ``--demo``'s own ``prepare_demo`` once per process (idempotent: a folder the
    reference run built is kept as it is) for every lever check of that name."""
    if name not in _FOLDERS:
        from dit_lora.config import parse_config
        from dit_lora.registry import get_spec

        root = demo_root(name, tmp_path_factory)
        cfg = parse_config(demo_args(name, demo_configs()[name], root, root / "unused"))
        get_spec(name).demo.prepare_demo(cfg)
        _FOLDERS[name] = root
    return _FOLDERS[name]


@dataclass
class QuantizedRun(DemoRun):
    """The reference run on an nf4 base: its flags are the reference run's plus :data:`NF4`."""

    def args(self, out: Path | None = None, **extra) -> list[str]:
        """The nf4 run's flags (``out``: another output folder; ``extra``: more flags)."""
        return with_flags(demo_args(self.name, self.config, self.root, out or self.out), **{**NF4, **extra})

    def plain_cfg(self):
        """The run's config without the quantized base: what a user loads the adapter with afterwards."""
        from dit_lora.config import parse_config

        return parse_config(demo_args(self.name, self.config, self.root, self.out))


def train_quantized(name: str, root: Path) -> QuantizedRun:
    """``name``'s reference run on an nf4 base, in process, in ``root/nf4``: the trainable weights after every
    update and the trained model kept."""
    states: dict[int, dict[str, torch.Tensor]] = {}
    held: dict = {}

    def record(step, model, optimizer):
        states[step] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        held["model"] = model

    run = QuantizedRun(name, demo_configs()[name], root, root / "nf4", {}, states, None, None)  # type: ignore[arg-type]
    run.summary = train(run.args(), on_step=record)
    run.model = held["model"]
    return run


def nf4_layers_reload(trained: torch.nn.Module, reloaded: torch.nn.Module) -> int:
    """Every adapted Linear of the trained model matches the layer of the same name in ``reloaded`` (the unquantized
    model, the adapter put on by the family's stock loader): the same LoRA update (``get_delta_weight``: both factors
    and the scaling, so the trained strength; up to the reloaded model's dtype), a base that differs from the
    unquantized weight by nf4 rounding only. Returns how many of them had an nf4 base."""
    import bitsandbytes as bnb
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = {n: m for n, m in reloaded.named_modules() if isinstance(m, BaseTunerLayer)}
    quantized = changed = 0
    for name, layer in trained.named_modules():
        if not isinstance(layer, BaseTunerLayer) or not isinstance(layer.get_base_layer(), torch.nn.Linear):
            continue
        (other,) = [m for n, m in layers.items() if n == name or n.endswith("." + name) or name.endswith("." + n)]
        want = layer.get_delta_weight(layer.active_adapters[0]).float()
        got = other.get_delta_weight(other.active_adapters[0]).float()
        # the reloaded factors may be stored in the pipeline's dtype (bf16): two roundings of 2**-8 each
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
        changed += bool(want.abs().max() > 0)
        base, plain = layer.get_base_layer(), other.get_base_layer()
        if not isinstance(base, bnb.nn.Linear4bit):
            continue
        assert not isinstance(plain, bnb.nn.Linear4bit)  # the reloaded base is the ordinary model's
        state = base.weight.quant_state
        weight = bnb.functional.dequantize_4bit(base.weight.data, state).float()
        original = plain.weight.detach()
        # the trained base is the nf4 rounding of this very weight: bitsandbytes' own quantization of it, exactly (not
        # a bound on the rounding: bitsandbytes 0.50's CPU kernel rounds rows that are not a multiple of its 64-wide
        # block far beyond NF4's half gap on AVX-512 machines, where the plain bound failed)
        again = bnb.functional.quantize_4bit(original.to(state.dtype), blocksize=state.blocksize,
                                             quant_type=state.quant_type)
        assert (weight - original.float()).abs().max() > 0, name  # quantized, not the plain weight
        assert torch.equal(weight, bnb.functional.dequantize_4bit(*again).float()), name
        quantized += 1
    assert changed, "training changed no adapted layer"
    return quantized


def launch_fsdp2(name: str, root: Path) -> tuple[str, Path]:
    """``name``'s demo under ``dit-lora launch --config_file accelerate_configs/fsdp2.yaml`` on 2 CPU processes (gloo;
    forked from a warm interpreter, warm_launch.py): the launch's output and its output folder."""
    from warm_launch import launch

    from dit_lora.registry import entry_for

    out = root / "fsdp2"
    args = with_flags(demo_args(name, demo_configs()[name], root, out), **FSDP2)
    proc: subprocess.CompletedProcess = launch(
        ["--config_file", str(ROOT / "accelerate_configs" / "fsdp2.yaml"), "--mixed_precision", "no"],
        ROOT / entry_for(name).recipe_script, args, env={"OMP_NUM_THREADS": "1"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    return text, out


@pytest.fixture(scope="module")
def quantized_run(family_name, tmp_path_factory) -> QuantizedRun:
    """The name's reference run on an nf4 base, trained once for every nf4 check of the module."""
    pytest.importorskip("bitsandbytes")
    assert family_name in quantized_names(), f"{family_name}'s spec declares no precision policy (spec.precision)"
    return train_quantized(family_name, demo_folder(family_name, tmp_path_factory))


@pytest.fixture(scope="module")
def fsdp2_launch(family_name, tmp_path_factory) -> tuple[str, Path]:
    """The name's FSDP2 launch, made once for every FSDP2 check of the module."""
    assert family_name in fsdp2_names(), f"{family_name}'s spec names no block lists (spec.info.block_lists)"
    return launch_fsdp2(family_name, demo_folder(family_name, tmp_path_factory))


class QuantizedBaseChecks:
    """The promises of a quantized base (``--quantize_base nf4``), for the module's ``family_name``."""

    @pytest.mark.slow
    def test_trains_on_an_nf4_base(self, quantized_run):
        summary, out = quantized_run.summary, quantized_run.out
        assert summary["status"] == "completed" and summary["config"]["quantize_base"] == "nf4"
        assert summary["steps"] == STEPS
        assert any(type(m).__name__ == "Linear4bit" for m in quantized_run.model.modules())
        saved = load_file(str(adapter_file(out)))
        assert saved and all(torch.isfinite(v).all() and v.dtype == torch.float32 for v in saved.values())
        assert any(".lora_B." in k and v.abs().max() > 0 for k, v in saved.items())  # lora_B starts at zero
        card = (out / "README.md").read_text()
        assert "Trained on a quantized base" in card and "--quantize_base nf4" in card

    @pytest.mark.slow
    def test_the_guard_drill_on_an_nf4_base_skips_one_update_and_changes_nothing(self, quantized_run):
        summary, states = quantized_run.summary, quantized_run.states
        assert summary["skipped_steps"] == 1 and summary["applied_updates"] == STEPS - 1
        assert same_tensors(states[DRILL], states[DRILL - 1])
        assert not same_tensors(states[DRILL + 1], states[DRILL])
        import json

        fault = json.loads((quantized_run.out / "nonfinite_report.json").read_text())["first_fault"]
        assert fault["quantized_base"]["scheme"] == "nf4"  # the report names the quantized base

    @pytest.mark.slow
    def test_the_adapter_reloads_into_the_unquantized_consumer_at_the_trained_strength(self, quantized_run):
        from dit_lora.registry import get_spec

        spec = get_spec(quantized_run.name)
        pipe = spec.adapter.load_pipeline_with_adapter(quantized_run.plain_cfg(), quantized_run.out,
                                                       torch.device("cpu"))
        assert nf4_layers_reload(quantized_run.model, consumer_model(pipe)) > 0

    @pytest.mark.slow
    def test_an_nf4_run_resumed_from_its_checkpoint_ends_bitwise_equal(self, quantized_run):
        resumed = resume_from_its_checkpoint(quantized_run, quantized_run.root / "resumed-nf4")
        summary, out = resumed["summary"], resumed["out"]
        assert summary["status"] == "completed" and summary["config"]["quantize_base"] == "nf4"
        assert summary["steps_this_run"] == STEPS - CHECKPOINT and summary["skipped_steps"] == 1
        written = sorted(quantized_run.out.glob("*.safetensors"))  # the adapter, and trained backbone weights if any
        assert adapter_file(quantized_run.out) in written
        for file in written:
            assert same_tensors(load_file(str(out / file.name)), load_file(str(file))), file.name
        assert summary["loss_history"] == quantized_run.summary["loss_history"]


class Fsdp2Checks:
    """The promises of FSDP2 on 2 processes, for the module's ``family_name``."""

    @pytest.mark.slow
    def test_fsdp2_shards_every_block_brought_from_host_memory_one_at_a_time(self, fsdp2_launch):
        text, out = fsdp2_launch
        assert "engine: FSDP2" in text
        found = re.search(r"FSDP2: (\d+) transformer block\(s\) .*, \1 of them brought from host memory", text)
        assert found and int(found[1]) > 0, text[-3000:]

    @pytest.mark.slow
    def test_one_ranks_nan_gradient_skips_the_update_on_both_ranks(self, fsdp2_launch):
        from helpers import read_summary

        summary = read_summary(fsdp2_launch[1])
        assert summary["num_processes"] == 2 and summary["steps"] == 3
        assert summary["skipped_steps"] == 1 and summary["nonfinite_grads"] == 1

    @pytest.mark.slow
    def test_the_adapter_is_written_once_and_finite(self, fsdp2_launch):
        text, out = fsdp2_launch
        assert text.count("adapter written:") == 1  # by the main process only
        saved = load_file(str(adapter_file(out)))
        assert saved and all(v.numel() and torch.isfinite(v).all() for v in saved.values())
        assert any(".lora_B." in k and v.abs().max() > 0 for k, v in saved.items())
