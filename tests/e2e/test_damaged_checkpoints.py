"""Damaged checkpoints: `latest` skips them with one line and resumes bit for bit from the newest whole one; naming
one explicitly is one paragraph; checkpoints of older dit-lora (no manifest) resume unverified and any load failure
is one paragraph; a foreign pickle is refused unread; a failed save leaves no staging folder."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
import torch
from safetensors.torch import load_file

from helpers import base_args, run_recipe, train_in_process
from dit_lora.core.errors import UserError
from dit_lora.output.adapter import NonFiniteWeightsError
from dit_lora.training.checkpoint import COMPLETE_MARKER

OPTS = dict(max_train_steps=6, checkpointing_steps=2, checkpoints_total_limit=10)
ADAPTER = "pytorch_lora_weights.safetensors"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("damaged-checkpoints")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_sana, shapes_data):
    """An uninterrupted run with checkpoint-2, -4 and -6 (each with its manifest)."""
    root = tmp_path_factory.mktemp("damaged-ref")
    summary, out = train_in_process(tiny_sana, shapes_data, root, **OPTS)
    assert isinstance(summary, dict), summary
    return out


def _copy(reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    (out / ADAPTER).unlink()
    return out


def _resume(tiny_sana, shapes_data, tmp_path, spec="latest"):
    return train_in_process(tiny_sana, shapes_data, tmp_path, resume_from_checkpoint=spec, **OPTS)[0]


def _assert_same_adapter(a, b):
    x, y = load_file(str(a / ADAPTER)), load_file(str(b / ADAPTER))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _drop_manifests(out):
    for marker in out.glob(f"checkpoint-*/{COMPLETE_MARKER}"):
        data = json.loads(marker.read_text())
        marker.write_text(json.dumps({"step": data["step"], "num_processes": data["num_processes"]}))


class _Payload:
    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


DAMAGE = {
    "trainable_weights.safetensors": "truncated", "optimizer.bin": "truncated", "trainer_state_rank0.json": "truncated",
    "guard_snapshot.safetensors": "truncated", "random_states_0.pkl": "missing",
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_latest_skips_a_damaged_checkpoint_and_resumes_bitwise(name, reference, tmp_path, tiny_sana, shapes_data,
                                                               capsys):
    out = _copy(reference, tmp_path)
    target = out / "checkpoint-6" / name
    if DAMAGE[name] == "truncated":
        os.truncate(target, 100)
    else:
        target.unlink()
    summary = _resume(tiny_sana, shapes_data, tmp_path)
    assert isinstance(summary, dict), summary
    text = capsys.readouterr().out
    skips = [line for line in text.splitlines() if line.startswith("skipping damaged")]
    assert skips == [f"skipping damaged checkpoint-6: {name} is {DAMAGE[name]}"
                     + (f" (100 of {(reference / 'checkpoint-6' / name).stat().st_size} bytes)"
                        if DAMAGE[name] == "truncated" else "")], text
    assert f"resumed from {out / 'checkpoint-4'} at step 4" in text
    _assert_same_adapter(reference, out)
    assert summary["steps_this_run"] == 2 and summary["loss_history"] == json.loads(
        (reference / "train_summary.json").read_text())["loss_history"]


def test_a_damaged_checkpoint_named_explicitly_is_refused(reference, tmp_path, tiny_sana, shapes_data):
    out = _copy(reference, tmp_path)
    os.truncate(out / "checkpoint-6" / "trainable_weights.safetensors", 100)
    err = _resume(tiny_sana, shapes_data, tmp_path, spec=str(out / "checkpoint-6"))
    assert isinstance(err, UserError), err
    text = str(err)
    assert "checkpoint-6` is damaged: trainable_weights.safetensors is truncated (100 of" in text
    assert "Whole checkpoints in" in text and "checkpoint-4, checkpoint-2" in text
    assert f"`--resume_from_checkpoint {out / 'checkpoint-4'}`" in text


def test_a_swapped_pickle_fails_verification_first(reference, tmp_path, tiny_sana, shapes_data, capsys):
    out = _copy(reference, tmp_path)
    (out / "checkpoint-6" / "optimizer.bin").write_bytes(pickle.dumps(_Payload(tmp_path / "ran")))
    err = _resume(tiny_sana, shapes_data, tmp_path, spec=str(out / "checkpoint-6"))
    assert isinstance(err, UserError) and "checkpoint-6` is damaged: optimizer.bin is truncated" in str(err), err
    summary = _resume(tiny_sana, shapes_data, tmp_path)
    assert isinstance(summary, dict) and "skipping damaged checkpoint-6: optimizer.bin" in capsys.readouterr().out
    assert not (tmp_path / "ran").exists()


def test_an_old_checkpoint_without_manifest_resumes_unverified(reference, tmp_path, tiny_sana, shapes_data, capsys):
    out = _copy(reference, tmp_path)
    shutil.rmtree(out / "checkpoint-6")
    _drop_manifests(out)
    summary = _resume(tiny_sana, shapes_data, tmp_path)
    assert isinstance(summary, dict), summary
    text = capsys.readouterr().out
    assert "checkpoint-4 has no manifest (written by an older dit-lora): resuming from it unverified" in text
    _assert_same_adapter(reference, out)


def test_an_old_checkpoint_holding_a_pickle_is_refused_unread(reference, tmp_path, tiny_sana, shapes_data):
    out = _copy(reference, tmp_path)
    _drop_manifests(out)
    (out / "checkpoint-6" / "optimizer.bin").write_bytes(pickle.dumps(_Payload(tmp_path / "ran")))
    err = _resume(tiny_sana, shapes_data, tmp_path)
    assert isinstance(err, UserError), err
    text = str(err)
    assert f"Checkpoint {out / 'checkpoint-6'} could not be loaded: optimizer.bin holds pickled objects" in text
    assert "weights_only" not in text and not (tmp_path / "ran").exists()
    assert "checkpoint-4 (unverified: no manifest), checkpoint-2 (unverified: no manifest)" in text


@pytest.mark.parametrize("name", ["trainable_weights.safetensors", "optimizer.bin", "trainer_state_rank0.json",
                                  "guard_snapshot.safetensors"])
def test_an_old_damaged_checkpoint_is_one_paragraph(name, reference, tmp_path, tiny_sana, shapes_data):
    out = _copy(reference, tmp_path)
    _drop_manifests(out)
    os.truncate(out / "checkpoint-6" / name, 100)
    err = _resume(tiny_sana, shapes_data, tmp_path)
    assert isinstance(err, UserError), repr(err)
    assert f"could not be loaded: {name} is damaged or truncated" in str(err)
    assert f"Resume from the newest with `--resume_from_checkpoint {out / 'checkpoint-4'}`" in str(err)


def test_recipe_exit_code_and_no_traceback(reference, tmp_path, tiny_sana, shapes_data):
    out = _copy(reference, tmp_path)
    _drop_manifests(out)
    os.truncate(out / "checkpoint-6" / "optimizer.bin", 100)
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", resume_from_checkpoint="latest",
                                attention_canary="false", **OPTS), warm=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "optimizer.bin is damaged or truncated" in " ".join(proc.stderr.split())


def test_a_failed_save_removes_its_staging_folder(tmp_path, tiny_sana, shapes_data):
    def poison(step, model, optimizer):  # a non-finite weight: the save refuses to write it
        if step == 2:
            with torch.no_grad():
                next(p for p in model.parameters() if p.requires_grad).fill_(float("nan"))

    err, out = train_in_process(tiny_sana, shapes_data, tmp_path, on_step=poison, **OPTS)
    assert isinstance(err, NonFiniteWeightsError), err
    assert not list(out.glob(".tmp-checkpoint-*")) and not list(out.glob("checkpoint-*"))


def test_a_fresh_run_never_mixes_with_an_older_runs_checkpoints(reference, tmp_path, tiny_sana, shapes_data, capsys):
    """Refused without --overwrite_output_dir; with it the old checkpoints go at start and the new run's own
    checkpoints survive pruning (before, the old ones' higher steps made it prune its own, and `latest` resumed the
    old run)."""
    out = _copy(reference, tmp_path)
    fresh = dict(OPTS, max_train_steps=4, checkpoints_total_limit=2)
    err = train_in_process(tiny_sana, shapes_data, tmp_path, **fresh)[0]
    assert isinstance(err, UserError) and "holds checkpoints of an earlier run (checkpoint-2" in str(err), err
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    capsys.readouterr()
    summary = train_in_process(tiny_sana, shapes_data, tmp_path, overwrite_output_dir="true", **fresh)[0]
    assert isinstance(summary, dict), summary
    text = capsys.readouterr().out
    assert f"--overwrite_output_dir: removed 3 checkpoint folder(s) of an earlier run from {out}" in text
    assert "pruned" not in text
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert json.loads((out / "checkpoint-4" / "trainer_state_rank0.json").read_text())["run"]["global_step"] == 4


def test_the_demo_config_runs_again_in_its_own_folder(tmp_path, tiny_sana, shapes_data, capsys):
    """The demo config sets overwrite_output_dir: a second run replaces the first's adapter and checkpoints."""
    from accelerate.state import AcceleratorState

    from helpers import ROOT
    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    args = ["--config", str(ROOT / "recipes/configs/sana/demo.yaml"), "--demo", "false",
            "--pretrained_model_name_or_path", str(tiny_sana), "--train_data_dir", str(shapes_data),
            "--output_dir", str(tmp_path / "out"), "--cache_dir", str(tmp_path / "cache"), "--max_train_steps", "3",
            "--checkpointing_steps", "1", "--report_to", "none", "--skip_doctor", "true",
            "--ignore_memory_plan", "true", "--validation_steps", "1000", "--attention_canary", "false"]
    for _ in range(2):
        AcceleratorState._reset_state(True)
        try:
            summary = train(parse_config(args))
        finally:
            AcceleratorState._reset_state(True)
        assert isinstance(summary, dict), summary
    assert "removed 2 checkpoint folder(s) of an earlier run" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]


MALFORMED = {  # what a hand-edited marker holds: each makes checkpoint-6 damaged, skipped by `latest`
    "a list": lambda m: [1, 2],
    "a bad size": lambda m: {**m, "optimizer.bin": {**m["optimizer.bin"], "size": "x"}},
    "an empty manifest, optimizer.bin then truncated": lambda m: {},
    "a file left out": lambda m: {k: v for k, v in m.items() if k != "optimizer.bin"},
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_latest_skips_a_checkpoint_whose_manifest_is_malformed(case, reference, tmp_path, tiny_sana, shapes_data,
                                                               capsys):
    out = _copy(reference, tmp_path)
    marker_path = out / "checkpoint-6" / COMPLETE_MARKER
    marker = json.loads(marker_path.read_text())
    marker_path.write_text(json.dumps({**marker, "files": MALFORMED[case](marker["files"])}))
    if case.startswith("an empty"):
        os.truncate(out / "checkpoint-6" / "optimizer.bin", 100)
    summary = _resume(tiny_sana, shapes_data, tmp_path)
    assert isinstance(summary, dict), summary
    text = capsys.readouterr().out
    assert "skipping damaged checkpoint-6: " in text and f"resumed from {out / 'checkpoint-4'} at step 4" in text
    _assert_same_adapter(reference, out)
