"""keep_final_checkpoint: which checkpoint holds the final state, when one is written, and a full disk there."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from dit_lora.core.fileio import DiskFullError
from dit_lora.training.finish import _drop_export_checkpoint, keep_final_checkpoint
from config_stand_in import stand_in


def _run(tmp_path, step=6, checkpointing_steps=0, resume=None, max_steps=6):
    lines = []
    run = SimpleNamespace(cfg=stand_in(checkpointing_steps=checkpointing_steps), state=SimpleNamespace(
        global_step=step), out=tmp_path, resume=resume, log=lines.append, schedule=SimpleNamespace(max_steps=max_steps))
    return run, lines


def _saver(tmp_path, calls):
    def save(run):
        calls.append(run.state.global_step)
        path = tmp_path / f"checkpoint-{run.state.global_step}"
        path.mkdir()
        return path
    return save


def test_written_unless_one_exists_for_the_step(tmp_path):
    calls = []
    run, _ = _run(tmp_path, checkpointing_steps=4)  # 6 is no multiple of 4: written now
    assert keep_final_checkpoint(run, 6, _saver(tmp_path, calls)) == tmp_path / "checkpoint-6" and calls == [6]
    run, _ = _run(tmp_path, step=8, checkpointing_steps=4, max_steps=8)  # after_update saved it
    assert keep_final_checkpoint(run, 8, _saver(tmp_path, calls)) == tmp_path / "checkpoint-8" and calls == [6]
    run, _ = _run(tmp_path, resume=Path("/x/checkpoint-6"))  # resumed at the last step: nothing trained
    assert keep_final_checkpoint(run, 0, _saver(tmp_path, calls)) == Path("/x/checkpoint-6") and calls == [6]


def test_no_space_for_it_is_a_warning(tmp_path):
    def full(run):
        raise DiskFullError("No space left on device while writing checkpoint-6")

    run, lines = _run(tmp_path)
    assert keep_final_checkpoint(run, 6, full) is None
    assert len(lines) == 1 and lines[0].startswith("warning: no space left on device for the final checkpoint-6 (")


def test_removed_after_the_export_only_with_checkpointing_off(tmp_path):
    (tmp_path / "checkpoint-6").mkdir()
    run, _ = _run(tmp_path, checkpointing_steps=2)
    _drop_export_checkpoint(run, tmp_path / "checkpoint-6")
    assert (tmp_path / "checkpoint-6").is_dir()  # the user asked for checkpoints: kept
    run, _ = _run(tmp_path, step=8, max_steps=6)  # resumed from a later step than this run's last: not ours to drop
    (tmp_path / "checkpoint-8").mkdir()
    _drop_export_checkpoint(run, tmp_path / "checkpoint-8")
    assert (tmp_path / "checkpoint-8").is_dir()
    run, lines = _run(tmp_path)
    _drop_export_checkpoint(run, tmp_path / "checkpoint-6")
    assert not (tmp_path / "checkpoint-6").exists() and lines[0].startswith("removed checkpoint-6")


def test_the_end_of_a_run_closes_the_trackers_and_leaves_the_process_group(tmp_path, monkeypatch):
    """Accelerator.end_training would destroy the process group, which sometimes aborted a finished two-process run
    in a gloo destructor (exit 134): the run closes its trackers only (a one-process gloo group here)."""
    import torch.distributed as dist
    from accelerate import Accelerator

    from dit_lora.training.finish import end_trackers

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29533")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    closed = []
    try:
        accelerator = Accelerator(cpu=True)
        accelerator.trackers = [type("Tracker", (), {"finish": lambda self: closed.append(True)})()]
        end_trackers(accelerator)
        assert closed == [True] and dist.is_initialized()
    finally:
        dist.destroy_process_group()


def test_the_final_samples_keep_the_size_setup_read_when_the_dataset_config_is_gone(tmp_path, monkeypatch):
    """The final samples read the dataset config again for their size: deleted mid-run, the run stopped after the
    adapter was written, without samples, summary, card or push. Setup's reading (RunRecord.sample_sizes) is used."""
    import yaml

    from dit_lora.config import parse_config
    from dit_lora.contract.capabilities import Samples
    from dit_lora.data.data_sets import sample_sizes
    from dit_lora.training import finish
    from dit_lora.training.run_parts import RunRecord

    path = tmp_path / "sets.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": "a", "resolution": 32}]}))
    cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--dataset_config",
                        str(path), "--validation_prompt", "a red square"])
    sizes = []
    samples = SimpleNamespace(capabilities=(Samples,), generate_with_pipeline=lambda pipe, prompt, c, *a, **k: (
        sizes.append(c.data.resolution) or ["s"]))
    spec = SimpleNamespace(name="stand-in", samples=samples, video_frames=None,
                           adapter=SimpleNamespace(load_pipeline_with_adapter=lambda *a: "pipe"))
    run = SimpleNamespace(cfg=cfg, spec=spec, out=tmp_path, comps=None, state=SimpleNamespace(global_step=1),
                          engine=SimpleNamespace(release_for_samples=lambda model: None),
                          features=SimpleNamespace(find=lambda kind: None), accelerator=SimpleNamespace(device="cpu"),
                          record=RunRecord(started=0.0, sample_sizes=sample_sizes(cfg, spec)[0]))  # as setup reads it
    monkeypatch.setattr(finish, "save_prompt_samples", lambda *a: [tmp_path / "final.png"])
    monkeypatch.setattr(finish, "log_samples", lambda *a: None)
    path.unlink()
    assert finish._final_samples(run, None) == [tmp_path / "final.png"] and sizes == [32]
