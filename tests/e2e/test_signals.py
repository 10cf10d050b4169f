"""SIGTERM / SIGINT / SIGHUP on real recipe processes: the update in flight finishes, a checkpoint is saved, the run
exits 143 / 130 / 129 with the resume command, and the resumed run is bitwise the uninterrupted one. Instants:
mid-update (accumulation 2), mid-save, during validation, during setup, a second signal, an external kill, two
processes, a closed terminal (SIGHUP). Every run is a fork of a warm interpreter (tests/support/warm.py): the reference,
the runs that signal themselves (DIT_LORA_SIGNAL), those signalled from outside while they run (``_start``) and the
launches' processes, each resume forked from the other one than its stopped run. The launchers' own handling of a
signal is tests/commands/test_launch.py's (real launchers); a signal ignored from the process's start (nohup),
tests/training/test_signals.py's (real processes)."""

from __future__ import annotations

import signal
import time

import pytest

import warm_launch
from helpers import ROOT, base_args, read_summary, run_recipe
from warm import start_script


def _resume_helpers():
    """test_resume.py's bitwise comparison (tests/ is not a package on the path: load the file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_resume_checks", ROOT / "tests" / "e2e" / "test_resume.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._adapter, module._assert_bitwise_equal


_adapter, _assert_bitwise_equal = _resume_helpers()

# Accumulation 2 (a signal mid-update must finish both micro-batches), validation every 2 updates, a checkpoint
# every 4: the signal's checkpoints fall between scheduled ones.
OPTS = dict(max_train_steps=6, checkpointing_steps=4, gradient_accumulation_steps=2, train_batch_size=2,
            resolution=32, random_flip="true", lora_dropout=0.1, lr_scheduler="cosine", lr_warmup_steps=2,
            validation_prompt="a red circle", validation_steps=2, validation_inference_steps=2)
pytestmark = pytest.mark.xdist_group("signals")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_sana, shapes_data):
    """The uninterrupted run every stopped-and-resumed run must equal."""
    root = tmp_path_factory.mktemp("signals-ref")
    proc = run_recipe(base_args(tiny_sana, shapes_data, root / "out", root / "cache", **OPTS), warm=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "out"


def _stopped_then_resumed(reference, out, tiny_sana, shapes_data, stopped, at_step, code=143):
    """Check the stopped run's exit, files and message, resume it, compare with the reference bit for bit."""
    text = stopped.stdout + stopped.stderr
    assert stopped.returncode == code, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert f"after step {at_step} of 6: saved {out / f'checkpoint-{at_step}'}" in text, text
    assert "--resume_from_checkpoint latest" in text
    assert (out / f"checkpoint-{at_step}" / "dit_lora_checkpoint_complete.json").is_file()
    assert not (out / "pytorch_lora_weights.safetensors").exists()
    cache = reference.parent / "cache"
    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, resume_from_checkpoint="latest", **OPTS),
                         warm=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"checkpoint-{at_step} at step {at_step}" in resumed.stdout
    _assert_bitwise_equal(_adapter(reference), _adapter(out))
    s_ref, s = read_summary(reference), read_summary(out)
    for key in ("steps", "samples_seen", "skipped_steps", "loss_history"):
        assert s[key] == s_ref[key], key


@pytest.mark.slow
@pytest.mark.parametrize("point,at_step,code", [
    ("micro_batch:5", 3, 143),  # first micro-batch of update 3: its second one runs, then the save
    ("checkpoint_before_marker:4", 4, 143),  # mid-save of the scheduled checkpoint-4: it completes, no second save
    ("validation:2:INT", 2, 130),  # during validation at update 2 (Ctrl-C): the samples finish, then the save
])
def test_signal_at_an_instant_saves_and_resumes_bitwise(point, at_step, code, reference, tmp_path, tiny_sana,
                                                        shapes_data):
    out = tmp_path / "out"
    stopped = run_recipe(base_args(tiny_sana, shapes_data, out, reference.parent / "cache", **OPTS),
                         env={"DIT_LORA_SIGNAL": point}, warm=True)
    if point.startswith("validation"):
        assert (out / "samples").is_dir() and list((out / "samples").glob("step2_*"))  # the samples finished
    _stopped_then_resumed(reference, out, tiny_sana, shapes_data, stopped, at_step, code)


def _start(args, **env):
    """The recipe running in the background, forked from a warm interpreter (tests/support/warm.py): the signal from
    outside meets the handlers the recipe installs, the same code from its first line as a fresh process's."""
    return start_script(ROOT / "recipes" / "sana_lora.py", args, env=env)


#: the progress line after the first update (a bar's first redraw, or the plain line without a terminal)
FIRST_STEP = "step 1/"


@pytest.mark.slow
def test_external_sigterm_while_training_saves_and_resumes_bitwise(reference, tmp_path, tiny_sana, shapes_data):
    """A real SIGTERM from outside, at whatever step the run is in."""
    out = tmp_path / "out"
    with _start(base_args(tiny_sana, shapes_data, out, reference.parent / "cache", **OPTS)) as proc:
        proc.read_until(FIRST_STEP)  # the loop has started
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=240)
        text = proc.output()
    step = int(text.split("stopped by SIGTERM after step ")[1].split()[0]) if proc.returncode == 143 else None
    assert step is not None, text

    class Done:
        returncode, stdout, stderr = proc.returncode, text, ""
    _stopped_then_resumed(reference, out, tiny_sana, shapes_data, Done, step)


@pytest.mark.slow
def test_sighup_while_training_saves_and_exits_129(tmp_path, tiny_sana, shapes_data):
    """A closed terminal or SSH session (SIGHUP) is a stop like SIGTERM: the checkpoint is saved, exit 129."""
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:  # the run would inherit it and rightly train on
        pytest.fail("SIGHUP is ignored in the test process (pytest started under nohup?): a run started from it "
                    "keeps SIGHUP ignored, as under nohup. Start pytest with SIGHUP handled (setsid, tmux, screen).",
                    pytrace=False)
    out = tmp_path / "out"
    opts = dict(OPTS, max_train_steps=100000, validation_prompt=None, checkpointing_steps=0)
    with _start(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", **opts)) as proc:
        proc.read_until(FIRST_STEP)
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=240)
        text = proc.output()
    assert proc.returncode == 129 and "Traceback" not in text, text
    assert "received SIGHUP: finishing the current update" in text and "stopped by SIGHUP after step" in text, text
    (checkpoint,) = out.glob("checkpoint-*")
    assert (checkpoint / "dit_lora_checkpoint_complete.json").is_file() and "--resume_from_checkpoint latest" in text


@pytest.mark.slow
def test_sigterm_during_setup_stops_in_one_line(tmp_path, tiny_sana, shapes_data):
    with _start(base_args(tiny_sana, shapes_data, tmp_path / "out", tmp_path / "cache", **OPTS)) as proc:
        proc.read_until("latent cache")  # caching the latents: loaded, nothing trained yet
        started = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        text = proc.output()
    assert proc.returncode == 143 and time.time() - started < 30, text
    assert "Traceback" not in text and text.count("received SIGTERM while setting up") == 1, text
    assert not list((tmp_path / "out").glob("checkpoint-*")) and FIRST_STEP not in text


@pytest.mark.slow
def test_a_second_signal_stops_at_once_leaving_the_last_whole_checkpoint(tmp_path, tiny_sana, shapes_data):
    """The first SIGTERM lands as validation at update 2 starts (after checkpoint-2); a long validation leaves time
    for a second one outside the repeat window: the process ends at once, checkpoint-2 whole, no new save."""
    out = tmp_path / "out"
    opts = dict(OPTS, checkpointing_steps=1, validation_inference_steps=2000)
    with _start(base_args(tiny_sana, shapes_data, out, tmp_path / "cache", **opts),
                DIT_LORA_SIGNAL="validation:2") as proc:
        proc.read_until("received SIGTERM")
        time.sleep(2.5)  # past REPEAT_WINDOW_S: a real second request, not the first one delivered twice
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        text = proc.output()
    assert proc.returncode == 143 and "again: stopped at once" in text and "Traceback" not in text, text
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (out / "checkpoint-2" / "dit_lora_checkpoint_complete.json").is_file()
    assert "stopped by SIGTERM" not in text  # no save-and-exit ran


@pytest.mark.slow
def test_two_processes_stop_together_when_one_is_signalled_and_resume_bitwise(tmp_path, tiny_sana, shapes_data):
    """`dit-lora launch --multi_gpu` on CPU (gloo); only rank 1 is signalled, after update 3's first micro-batch:
    both ranks stop after update 4 (one update later: the agreement), save one checkpoint together, exit 143."""
    opts = dict(OPTS, validation_prompt=None, max_train_steps=6, checkpointing_steps=0)
    cache = tmp_path / "cache"

    def launch(out, **env):  # the processes forked from a warm interpreter (warm_launch.py)
        return warm_launch.launch(["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision",
                                   "no", "--dynamo_backend", "no"], ROOT / "recipes" / "sana_lora.py",
                                  base_args(tiny_sana, shapes_data, out, cache, **opts),
                                  env={"OMP_NUM_THREADS": "1", **env}, timeout=400)

    ref = launch(tmp_path / "ref")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    out = tmp_path / "out"
    stopped = launch(out, DIT_LORA_SIGNAL="micro_batch:5@1")
    text = stopped.stdout + stopped.stderr
    assert stopped.returncode == 143, text
    assert "stopped by a stop signal that another process received after step 4 of 6" in text, text
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-4"] and "Traceback" not in text
    assert {p.name for p in (out / "checkpoint-4").glob("trainer_state_rank*.json")} == {
        "trainer_state_rank0.json", "trainer_state_rank1.json"}
    opts["resume_from_checkpoint"] = "latest"
    resumed = launch(out)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _assert_bitwise_equal(_adapter(tmp_path / "ref"), _adapter(out))
