"""The held-out validation loss in Sana runs (in-process, tiny model): a separate held-out folder, a loss before the
first update and after each one, the same adapter bit for bit as a run without it (LoRA dropout on: the evaluation
must leave the global random stream alone), the figures in the summary, the curve, the card and the checkpoints,
and a resumed run that keeps the history and evaluates the same weights to the same number.

Its other runs: a video LLM (tests/e2e/test_videollm.py), Wan 2.2 A14B with both experts (tests/e2e/test_wan.py),
two processes under FSDP2 and DDP with a kill and resume (tests/e2e/test_fsdp2.py); the split and the evaluation's
pieces: tests/data/test_held_out.py, tests/training/test_validation_loss.py."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers import train_in_process
from safetensors.torch import load_file

ADAPTER = "pytorch_lora_weights.safetensors"
#: two updates, a checkpoint and a held-out evaluation after each, LoRA dropout drawing from the global stream
FLAGS = dict(max_train_steps=2, checkpointing_steps=1, validation_steps=1, lora_dropout=0.1, lr_warmup_steps=0)



@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_sana, shapes_data):
    """(summary, output folder) of the run with a held-out folder of 3 images, and of the same run without it."""
    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    root = tmp_path_factory.mktemp("validation-loss")
    held = make_shapes_dataset(root / "held", n=3, size=64, seed=5)
    cache = root / "cache"
    with_loss = train_in_process(tiny_sana, shapes_data, root / "with", validation_data_dir=held, cache_dir=cache,
                                 **FLAGS)
    without = train_in_process(tiny_sana, shapes_data, root / "without", cache_dir=cache, **FLAGS)
    for summary, _ in (with_loss, without):
        assert isinstance(summary, dict) and summary["status"] == "completed", summary
    return {"with": with_loss, "without": without, "held": held, "cache": cache}


@pytest.mark.slow
def test_the_held_out_loss_changes_no_weight_and_is_reported_everywhere(runs):
    (summary, out), (plain, plain_out) = runs["with"], runs["without"]
    trained, reference = load_file(out / ADAPTER), load_file(plain_out / ADAPTER)
    assert trained.keys() == reference.keys() and all(torch.equal(trained[k], reference[k]) for k in trained)
    assert plain["validation_loss"] is None and plain["loss_history"] == summary["loss_history"]

    figures = summary["validation_loss"]
    steps = [step for step, _ in figures["evaluations"]]
    losses = [loss for _, loss in figures["evaluations"]]
    assert steps == [0, 1, 2] and all(loss is not None and loss > 0 for loss in losses)
    assert losses[0] != losses[2]  # the adapter's weights, not the base's alone, are evaluated
    assert figures["samples"] == 3 and figures["source"] == "--validation_data_dir"
    assert figures["folder"] == str(runs["held"]) and sorted(figures["keys"]) == ["00000.png", "00001.png", "00002.png"]
    best = min(range(3), key=lambda i: losses[i])
    assert (figures["best_step"], figures["best_loss"], figures["final_loss"]) == (steps[best], losses[best], losses[2])
    # every checkpoint holds the history so far; the curve and the card show it
    state = json.loads((out / "checkpoint-1" / "trainer_state_rank0.json").read_text())
    assert state["run"]["validation_losses"] == [[0, losses[0]], [1, losses[1]]]
    assert (out / "loss_curve.png").is_file()  # what it draws: tests/output/test_report.py
    card = " ".join((out / "README.md").read_text().split())
    assert f"| validation loss (held out) | {losses[2]:.6g} at the end, best {losses[best]:.6g} at step {best}" in card
    assert str(runs["held"]) not in card  # the user's folder stays out of a card that may be pushed


@pytest.mark.slow
def test_a_resumed_run_keeps_the_history_and_evaluates_the_same_weights_to_the_same_number(runs, tiny_sana,
                                                                                            shapes_data, tmp_path):
    """The issue's "done when": the loss of step 2 computed by another run (resumed from checkpoint-1) on the same
    weights is the same number, bit for bit, and the history of the first run's evaluations survives the resume."""
    summary, out = runs["with"]
    shutil.copytree(out, tmp_path / "out")
    shutil.rmtree(tmp_path / "out" / "checkpoint-2")
    resumed, again = train_in_process(tiny_sana, shapes_data, tmp_path, validation_data_dir=runs["held"],
                                      cache_dir=runs["cache"], resume_from_checkpoint="latest", **FLAGS)
    assert isinstance(resumed, dict) and resumed["steps_this_run"] == 1, resumed
    assert resumed["validation_loss"]["evaluations"] == summary["validation_loss"]["evaluations"]
    first, second = load_file(out / ADAPTER), load_file(again / ADAPTER)
    assert all(torch.equal(first[k], second[k]) for k in first)
