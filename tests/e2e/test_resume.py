"""Kill a run (during a checkpoint save, and with SIGKILL mid-training), resume, and get the same adapter bit for bit.

The runs are forks of a warm interpreter (``warm=True``, tests/support/warm.py); a resume is forked from the other
one than the run that wrote its checkpoint: another hash seed and memory layout, as in a new process."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from dit_lora.core.fileio import default_file_mode
from helpers import base_args, read_summary, run_recipe

COMMON = dict(max_train_steps=8, checkpointing_steps=4, gradient_accumulation_steps=2, random_flip="true",
              lora_dropout=0.1, lr_scheduler="cosine", lr_warmup_steps=2, max_grad_norm=0.5)


ADAPTER = "pytorch_lora_weights.safetensors"


def _adapter(out):
    return load_file(str(out / ADAPTER))


def _assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and bool((a[k] == b[k]).all()), k


# Run settings for the property: default flags first, then the levers that used to break it.
SETTINGS = {
    # Default behaviour flags (kernels auto, canary on, checks on, bf16); 32 px and batch 2 only shrink the work.
    "defaults": dict(max_train_steps=12, checkpointing_steps=4, resolution=32, train_batch_size=2),
    # Triton under the interpreter costs per token: 32 px and batch 2 keep the kernels run short.
    "accumulation_kernels_rollback": dict(COMMON, max_train_steps=8, kernels="on", inject_faults="nan_loss@2-3",
                                          max_consecutive_skips=2, resolution=32, train_batch_size=2),
    # Default flags, but a kernel check every 3 updates (1, 3, 6): one falls after the resume point (checkpoint-4),
    # so the checkpointed check schedule and kernel state decide the resumed run's path.
    "defaults_check_after_resume": dict(max_train_steps=8, checkpointing_steps=4, resolution=32, train_batch_size=2,
                                        kernel_check_interval=3),
    # Images of six aspect ratios and squares in their buckets (--aspect_buckets auto): batches of one bucket each,
    # drawn per epoch from the groups (the tiny model's 64 px buckets give 8 batches an epoch), so the resume from
    # checkpoint-8 continues in the second epoch's order. With caption dropout too (drawn per seed, epoch and
    # sample; its other properties: tests/e2e/test_caption_dropout.py): the kill and resume cost no runs of their own.
    "mixed_aspect": dict(max_train_steps=12, checkpointing_steps=4, train_batch_size=2, random_flip="true",
                         caption_dropout_probability=0.5),
}
#: the settings trained on the mixed-aspect images (the conftest's mixed_aspect_data) instead of the square shapes
MIXED_DATA = {"mixed_aspect"}
# Kill instants: (DIT_LORA_FAULT, the checkpoint the resume must start from). Mid-step (micro_batch), mid-save
# (checkpoint_before_marker: the save of that step is incomplete) and right after a save (checkpoint_after_rename).
INSTANTS = {
    "defaults": [("micro_batch:6", 4), ("checkpoint_before_marker:8", 4), ("checkpoint_after_rename:4", 4)],
    # mid-update (accumulation 2), after a rollback that checkpoint-4 holds (Triton's interpreter makes each
    # case here ~100 s on 2 cores: the other instants are covered by the settings without --kernels on)
    "accumulation_kernels_rollback": [("micro_batch:11", 4)],
    # mid-save of step 8 (a leftover .tmp-checkpoint-8), so the resume from 4 runs the check at 6
    "defaults_check_after_resume": [("checkpoint_before_marker:8", 4)],
    # mid-step in the second epoch
    "mixed_aspect": [("micro_batch:10", 8)],
}
# What the uninterrupted reference must show, or a setting does not test what it is named for.
REFERENCE_FACTS = {
    # the rollback (streak at updates 2-3, guard check every 2 updates) happens at update 4, before the
    # checkpoint-4 the resumes start from: its snapshot, LR factor and counters must come back from the checkpoint
    "accumulation_kernels_rollback": lambda s: s["rollbacks"] == 1 and s["rollback_events"][0]["step"] == 4
    and s["rollback_events"][0]["lr_factor"] == 0.5 and s["skipped_steps"] == 2,
    # kernel checks at updates 1, 3 and 6: the one at 6 runs after the resume point
    "defaults_check_after_resume": lambda s: s["kernels"]["check_interval"] == 3 and s["kernels"]["checks"] == 3,
}


def _group(setting: str):
    """The tests of one setting share its reference run: one pytest-xdist worker runs them all (``loadgroup``)."""
    return pytest.mark.xdist_group(f"resume-{setting}")


@pytest.fixture(scope="module")
def references(tmp_path_factory, tiny_sana, shapes_data, mixed_aspect_data):
    """``reference(setting)``: the setting's uninterrupted run, made the first time a test asks for it."""
    root = tmp_path_factory.mktemp("resume-refs")
    done = {}

    def reference(name):
        if name not in done:
            out = root / name
            data = mixed_aspect_data if name in MIXED_DATA else shapes_data
            proc = run_recipe(base_args(tiny_sana, data, out, root / "cache", **SETTINGS[name]), warm=True)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            summary = read_summary(out)
            assert REFERENCE_FACTS.get(name, lambda s: True)(summary), (name, {k: summary[k] for k in (
                "rollbacks", "rollback_events", "skipped_steps", "kernels")})
            done[name] = out
        return done[name]

    return reference


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=_group(name)) for name in REFERENCE_FACTS])
def test_the_references_show_what_each_setting_is_for(references, name):
    """The facts the settings rely on, checked on the references (also asserted when they are built)."""
    assert REFERENCE_FACTS[name](read_summary(references(name))), name


@pytest.mark.slow
@pytest.mark.parametrize("setting,fault,resume_at", [pytest.param(s, f, r, marks=_group(s))
                                                     for s, cases in INSTANTS.items() for f, r in cases])
def test_killed_then_resumed_is_bitwise_identical(setting, fault, resume_at, references, tmp_path, tiny_sana,
                                                  shapes_data, mixed_aspect_data):
    reference = references(setting)
    shapes_data = mixed_aspect_data if setting in MIXED_DATA else shapes_data
    opts, out, cache = SETTINGS[setting], tmp_path / "interrupted", reference.parent / "cache"
    killed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, checkpoints_total_limit=1, **opts),
                        env={"DIT_LORA_FAULT": fault}, warm=True)
    assert killed.returncode == 137, killed.stdout + killed.stderr
    assert not (out / "pytorch_lora_weights.safetensors").exists()
    if opts.get("caption_dropout_probability"):
        assert "caption dropout: each step drops" in killed.stdout, killed.stdout
        assert "the empty caption encoded once" not in killed.stdout  # the reference's cache entry is reused
    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, checkpoints_total_limit=1,
                                   resume_from_checkpoint="latest", **opts), warm=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"checkpoint-{resume_at} at step {resume_at}" in resumed.stdout, resumed.stdout
    _assert_bitwise_equal(_adapter(reference), _adapter(out))
    # the file itself, not only its tensors: the same sha256 (its config's sets and the safetensors metadata are
    # written in sorted order, not in each process's hash order)
    assert (out / ADAPTER).read_bytes() == (reference / ADAPTER).read_bytes()
    # every file the run wrote (adapter, checkpoints, card, summary, samples) has the umask's mode, none 0600
    mode = default_file_mode()
    assert [p for p in out.rglob("*") if p.is_file() and p.stat().st_mode & 0o777 != mode] == []
    s_ref, s = read_summary(reference), read_summary(out)
    for key in ("steps", "samples_seen", "skipped_steps", "rollbacks", "applied_updates", "loss_history"):
        assert s[key] == s_ref[key], key
    assert s["kernels"]["fallbacks"] == s_ref["kernels"]["fallbacks"]
    assert s["kernels"]["implementations"] == s_ref["kernels"]["implementations"]
    assert s["kernels"]["checks"] == s_ref["kernels"]["checks"]  # the same check schedule, not re-run at resume
    assert s["rollback_events"] == s_ref["rollback_events"]
    assert not list(out.glob(".tmp-checkpoint-*"))
    # Checkpoints hold the weights as trained; only the exported adapter has lora_alpha / rank = 8 / 4 folded
    # into lora_B (once) and stores alpha = rank.
    (last,) = out.glob("checkpoint-*")
    checkpointed, exported = load_file(str(last / "trainable_weights.safetensors")), _adapter(out)
    assert len(checkpointed) == len(exported) > 0
    for name, value in checkpointed.items():
        assert torch.equal(exported["transformer." + name.replace(".default.", ".")],
                           value * 2 if ".lora_B." in name else value), name


@pytest.mark.slow
def test_kernel_fallbacks_survive_a_resume(tmp_path, tiny_sana, shapes_data):
    """A kernel switched off before a checkpoint stays off after it (broken_kernel drill, --kernels on)."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    opts = dict(max_train_steps=4, checkpointing_steps=2, kernels="on", inject_faults="broken_kernel", resolution=32)
    killed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, **opts), env={"DIT_LORA_FAULT": "micro_batch:3"},
                        warm=True)
    assert killed.returncode == 137, killed.stdout + killed.stderr
    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, resume_from_checkpoint="latest", **opts),
                         warm=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    summary = read_summary(out)
    assert summary["kernels"]["implementations"]["modulate"] == "reference"
    assert [f["step"] for f in summary["kernels"]["fallbacks"]] == [1] and summary["skipped_steps"] == 1


@pytest.mark.slow
def test_resume_from_incomplete_checkpoint_is_refused(tmp_path, tiny_sana, shapes_data):
    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache",
                                resume_from_checkpoint=str(out / "checkpoint-3")), warm=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "is incomplete" in text and "Traceback" not in text


@pytest.mark.slow
def test_resume_refuses_a_changed_alpha_and_records_a_changed_learning_rate(tmp_path, tiny_sana, shapes_data):
    """Train 4 steps with checkpoints; a resume with another --lora_alpha is refused in one paragraph (exit 2); one
    with another --learning_rate runs, says so in one line, and the summary and card record it with its step."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    opts = dict(max_train_steps=4, checkpointing_steps=2, resolution=32, train_batch_size=2)
    first = run_recipe(base_args(tiny_sana, shapes_data, out, cache, **opts), warm=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (out / "checkpoint-4" / "run_options.json").is_file()
    more = dict(opts, max_train_steps=6, resume_from_checkpoint="latest")
    refused = run_recipe(base_args(tiny_sana, shapes_data, out, cache, **dict(more, lora_alpha=16)), warm=True)
    text = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode == 2, text
    assert "lora_alpha 8.0 -> 16.0" in text and "--allow_changed_options" in text and "Traceback" not in text
    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, **dict(more, learning_rate=5e-4)), warm=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "changed at step 4: max_train_steps 4 -> 6, learning_rate 0.001 -> 0.0005" in resumed.stdout
    changed = {c["option"]: c for c in read_summary(out)["changed_options"]}
    assert changed["learning_rate"] == {"step": 4, "option": "learning_rate", "old": 1e-3, "new": 5e-4}
    card = " ".join((out / "README.md").read_text().split())
    assert "`learning_rate` 0.001 -> 0.0005 at step 4" in card
    # the history travels in every later checkpoint
    assert "learning_rate" in (out / "checkpoint-6" / "run_options.json").read_text()
