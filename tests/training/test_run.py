"""training/run.py: setup's own checks (the stages themselves are exercised by every recipe run in tests/e2e): an
update longer than an epoch refused, a batch larger than the data, --validation_epochs in updates."""

from __future__ import annotations

import pytest

from dit_lora.core.errors import UserError


def test_accumulation_longer_than_an_epoch_is_refused_with_the_largest_sensible_value():
    from types import SimpleNamespace

    from dit_lora.training.run import check_accumulation

    cfg = SimpleNamespace(gradient_accumulation_steps=1_000_000_000, train_batch_size=4)
    with pytest.raises(UserError) as caught:
        check_accumulation(cfg, batches_per_epoch=8, samples=32, world=1)
    text = str(caught.value)
    assert "--gradient_accumulation_steps 1000000000" in text and "32 usable samples" in text
    assert text.endswith("Use at most --gradient_accumulation_steps 8, or add data.") and "\n" not in text
    check_accumulation(SimpleNamespace(gradient_accumulation_steps=8, train_batch_size=4), 8, 32, 1)  # one epoch: ok


@pytest.mark.slow
def test_a_run_with_accumulation_beyond_the_data_stops_before_training(tmp_path, tiny_sana, shapes_data):
    from helpers import train_in_process

    err, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=1, checkpointing_steps=0,
                                gradient_accumulation_steps=1_000_000_000)
    assert isinstance(err, UserError) and "Use at most --gradient_accumulation_steps" in str(err), repr(err)


@pytest.mark.slow
def test_batch_larger_than_the_data_trains_at_the_data_size_and_says_so(tiny_sana, tmp_path, capsys):
    """The issue's run: --train_batch_size 64 on 4 images trained at batch 4 while the log and the card said 64."""
    from helpers import train_in_process

    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    data = make_shapes_dataset(tmp_path / "four", n=4, size=64, seed=0)
    summary, out = train_in_process(tiny_sana, data, tmp_path, max_train_steps=1, train_batch_size=64,
                                    resolution=32, mixed_precision="no", lr_warmup_steps=0)
    assert isinstance(summary, dict), summary
    assert summary["train_batch_size"] == 4 and summary["config"]["train_batch_size"] == 64
    printed = " ".join(capsys.readouterr().out.split())
    assert ("--train_batch_size 64: the data has 4 usable sample(s), so each micro-batch holds at most 4: training "
            "at batch 4") in printed
    assert "process(es), batch 4 x accumulation" in printed
    assert "| train_batch_size | 4 (--train_batch_size 64;" in (out / "README.md").read_text()


def test_validation_epochs_become_updates():
    from dit_lora.config import TrainConfig
    from dit_lora.training.run import validation_every_epochs

    lines = []
    cfg = validation_every_epochs(TrainConfig.for_family("sana", validation_epochs=25), 2, lines.append)
    assert cfg.validation.validation_steps == 50 and lines == ["--validation_epochs 25: validating every 50 updates "
                                                               "(2 an epoch)"]
