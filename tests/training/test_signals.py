"""StopSignals: the handler's phases, repeats, the ranks' agreement, the resume command, the launcher tie."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dit_lora.core.errors import Interrupted, UserError
from dit_lora.training import signals
from dit_lora.training.drills import _signal_point
from config_stand_in import stand_in


@pytest.fixture
def stop():
    watcher = signals.StopSignals()
    watcher.install()
    yield watcher
    watcher.uninstall()


def test_setup_phase_raises_interrupted_with_the_signals_code(stop):
    with pytest.raises(Interrupted) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs at the next bytecode; never reached
    assert info.value.exit_code == 143 and "nothing to save" in str(info.value)


def test_sigint_in_setup_is_130_and_not_a_keyboard_interrupt(stop):
    with pytest.raises(Interrupted) as info:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    assert info.value.exit_code == 130


def test_training_phase_only_sets_the_flag_and_repeats_in_the_window_are_one(stop, capfd):
    stop.phase = "training"
    assert not stop.should_stop()
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)  # within REPEAT_WINDOW_S: the same request, not "stop at once"
    assert stop.should_stop() and stop.signum == signal.SIGTERM and stop.exit_code == 143
    err = capfd.readouterr().err
    assert err.count("received") == 1 and "saving a checkpoint" in err


def test_handlers_are_given_back():
    # SIGHUP handled, as outside nohup (a nohup'd pytest ignores it, and then install rightly leaves it alone)
    hangup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        before = {signum: signal.getsignal(signum) for signum in signals.EXIT_CODES}
        watcher = signals.StopSignals()
        watcher.install()
        try:  # a bound method is a new object on each access: compare with ==
            assert all(signal.getsignal(signum) == watcher._handle for signum in before)
        finally:
            watcher.uninstall()
        assert {signum: signal.getsignal(signum) for signum in before} == before
    finally:
        signal.signal(signal.SIGHUP, hangup)


@pytest.mark.parametrize("rank", ["0", "1"])
def test_only_the_main_process_speaks_when_stopped_in_setup(monkeypatch, rank):
    """Before start_training, the launcher's RANK says which process is the main one: one line per run, not one
    per process."""
    monkeypatch.setenv("RANK", rank)
    watcher = signals.StopSignals()
    watcher.install()
    try:
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    finally:
        watcher.uninstall()
    assert info.value.exit_code == 143
    assert ("while setting up" in str(info.value)) is (rank == "0") and (str(info.value) == "") is (rank == "1")


SIGHUP_CHILD = textwrap.dedent("""
    import sys, time
    from dit_lora.training import signals
    stop = signals.StopSignals(); stop.install(); stop.phase = "training"
    print("ready", flush=True)  # after install: a signal from now on is handled
    # The test writes "sent" only after its SIGHUP: by the time this read returns the kernel has delivered the signal
    # (or dropped it, ignored), and Python runs a handler at the next bytecode; a few "updates" then see any flag.
    sys.stdin.readline()
    for _ in range(5):
        time.sleep(0.02)
        if stop.should_stop():
            print("saved after", stop.signum, flush=True)
            sys.exit(stop.exit_code)
    print("ran through", flush=True)
""")


@pytest.mark.slow
@pytest.mark.parametrize("ignored", [False, True])
def test_sighup_saves_and_exits_129_unless_the_process_started_with_it_ignored(ignored):
    """A closed terminal (SIGHUP) stops the run like SIGTERM, exit 129; under nohup (SIGHUP ignored when the process
    starts) it stays ignored and the run goes on."""
    # the child's start stated either way: under a nohup'd pytest it would otherwise inherit SIGHUP ignored
    preexec = lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen([sys.executable, "-c", SIGHUP_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate("sent\n", timeout=60)
    if ignored:
        assert proc.returncode == 0 and out == "ran through\n" and err == "", err
    else:
        assert proc.returncode == 129 and out == f"saved after {int(signal.SIGHUP)}\n", err
        assert "received SIGHUP: finishing the current update, then saving a checkpoint" in err



def test_train_keeps_the_handlers_the_recipe_installed_and_releases_its_own(monkeypatch, tmp_path):
    """``recipe.main`` installs the handlers for the whole process: ``train`` leaves them (a launcher's forwarded
    repeat of the stop must not meet Python's default handler); an in-process ``train`` gives back its own."""
    from dit_lora.training import loop

    def stopped_in_setup(cfg, on_step, stop):
        raise Interrupted("stopped", 143)

    monkeypatch.setattr(loop, "_train", stopped_in_setup)
    cfg = stand_in(output_dir=str(tmp_path))
    before = signal.getsignal(signal.SIGINT)
    assert not signals.installed()
    with pytest.raises(Interrupted):
        loop.train(cfg)  # in process: its own handlers, given back
    assert not signals.installed() and signal.getsignal(signal.SIGINT) == before
    recipe_stop = signals.current()  # as recipe.main does
    try:
        with pytest.raises(Interrupted):
            loop.train(cfg)
        assert signals.current() is recipe_stop and signal.getsignal(signal.SIGINT) == recipe_stop._handle
        assert recipe_stop.phase == "ended"
        os.kill(os.getpid(), signal.SIGINT)  # after train: noted, not raised (the process is exiting anyway)
        time.sleep(0.1)
        assert recipe_stop.signum == signal.SIGINT
    finally:
        signals.release()


@pytest.mark.slow
def test_a_forwarded_repeat_after_a_stop_in_setup_is_not_a_traceback(tmp_path):
    """Ctrl-C under dit-lora launch reaches the training process twice (the terminal, then the launcher): the second
    arrives after train() ended, while run_cli prints the stop; it must not become a KeyboardInterrupt. The script
    signals itself: a fork of a warm interpreter (tests/support/warm.py), the training loop's imports paid once."""
    from warm import run_script

    code = textwrap.dedent("""
        import os, signal, sys, time
        from dit_lora.core.errors import run_cli
        from dit_lora.training import loop, signals

        class Cfg:
            class training:  # the one option train() reads before setup
                output_dir = "."

        class Stderr:  # the launcher's copy arrives while run_cli prints the stop (in its except clause)
            def __init__(self, stream):
                self.stream, self.sent = stream, False
            def write(self, text):
                if not self.sent:
                    self.sent = True
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.2)
                return self.stream.write(text)
            def flush(self):
                self.stream.flush()

        def setup(cfg, on_step, stop):
            os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C while setting up
            time.sleep(5)

        def main():
            signals.current()  # as recipe.main does
            loop._train = setup
            sys.stderr = Stderr(sys.stderr)
            loop.train(Cfg())

        run_cli(main)
    """)
    script = tmp_path / "repeat.py"
    script.write_text(code)
    proc = run_script(script, [], timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert proc.stderr.count("received SIGINT while setting up") == 1, proc.stderr


def test_a_second_signal_after_the_window_exits_at_once():
    code = textwrap.dedent("""
        import os, signal, time
        from pathlib import Path
        from dit_lora.training import signals
        stop = signals.StopSignals(); stop.install(); stop.phase = "training"; stop.output_dir = Path("/x/out")
        os.kill(os.getpid(), signal.SIGINT)
        stop.first_at -= signals.REPEAT_WINDOW_S + 1
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        print("not reached")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert "not reached" not in proc.stdout and "Traceback" not in proc.stderr
    assert "again: stopped at once" in proc.stderr and "/x/out" in proc.stderr


@pytest.mark.slow  # starts processes (forks of a warm interpreter)
def test_ranks_agree_on_one_step_when_only_one_is_signalled(tmp_path):
    """Two gloo processes; only rank 1 is flagged after update 3: both stop after update 4 (the reduction started
    after an update is read after the next one). Forked from a warm interpreter (tests/support/warm.py): what the
    two compute, not their start."""
    from warm import run_ranks

    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent("""
        import os
        import torch.distributed as dist
        from dit_lora.training import signals
        dist.init_process_group("gloo")  # env://: the group's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
        rank = dist.get_rank()
        class Acc:
            num_processes, is_main_process = 2, rank == 0
        stop = signals.StopSignals(); stop.start_training(Acc(), ".")
        for step in range(1, 10):
            if rank == 1 and step == 3:
                stop.signum = 15
            if stop.should_stop():
                break
        print("stopped after", step, flush=True)
        os._exit(0)  # not torn down: a gloo group freed at the interpreter's end can deadlock (test_liger_ddp.py)
    """))
    done = run_ranks(script, [], 2, timeout=120)
    assert [d.returncode for d in done] == [0, 0], [d.stderr for d in done]
    assert [d.stdout for d in done] == ["stopped after 4\n", "stopped after 4\n"], done


def test_resume_command_drops_an_earlier_resume_and_names_the_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["recipes/sana_lora.py", "--config", "my run.yaml",
                                      "--resume_from_checkpoint", "checkpoint-2", "--resume_from_checkpoint=x"])
    monkeypatch.setenv(signals.LAUNCHED_VAR + "_COMMAND", "dit-lora launch --num_processes 1")
    text = signals.resume_command(tmp_path, 7)
    assert text.endswith("dit-lora launch --num_processes 1 recipes/sana_lora.py --config 'my run.yaml' "
                         "--resume_from_checkpoint latest")
    assert str(tmp_path / "checkpoint-7") in text and "checkpoint-2" not in text


@pytest.mark.parametrize("main, launcher, start", [
    ("/site/dit_lora/__main__.py", "", "python -m dit_lora train"),  # python -m dit_lora train
    ("/site/dit_lora/__main__.py", "dit-lora launch -m --num_processes 2", "dit-lora launch -m --num_processes 2 "
     "dit_lora train"),  # the launcher's -m names the module next
    ("/venv/bin/dit-lora", "", "dit-lora train"),  # the console script
])
def test_resume_command_of_the_train_command_starts_it_the_same_way(monkeypatch, main, launcher, start):
    monkeypatch.setattr(sys, "argv", [main, "train", "--config", "run.yaml", "--resume_from_checkpoint", "x"])
    monkeypatch.setattr(signals, "_launched", lambda: bool(launcher))
    monkeypatch.setitem(signals._LAUNCHED, "by", "prctl" if launcher else None)
    monkeypatch.setenv(signals.LAUNCHED_VAR + "_COMMAND", launcher)
    assert signals.rerun_command() == f"{start} --config run.yaml --resume_from_checkpoint latest"


def test_signal_point_parsing():
    assert _signal_point("micro_batch:3", 0) == ("micro_batch", 3, signal.SIGTERM)
    assert _signal_point("validation:2:INT", 0) == ("validation", 2, signal.SIGINT)
    assert _signal_point("micro_batch:3@1", 0) is None and _signal_point("micro_batch:3@1", 1)[1] == 3
    for bad in ("nowhere:3", "micro_batch:x", "micro_batch:3:KILL", "micro_batch:3@a"):
        with pytest.raises(UserError, match="DIT_LORA_SIGNAL"):
            _signal_point(bad, 0)


def test_a_shell_started_run_is_not_tied_to_its_parent(monkeypatch):
    for var in (signals.LAUNCHED_VAR, "TORCHELASTIC_RUN_ID", "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.delenv(var, raising=False)
    assert not signals._launched()
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # exported in a shell: the parent is no launcher
    # the parent a shell-started run has (pytest's own may be any command line, `bash -c "pytest
    # tests/e2e/test_accelerate_configs.py"` holding a launcher's word)
    monkeypatch.setattr(signals, "_parent_cmdline", lambda: "-bash")
    assert not signals._launched()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert signals._launched()


@pytest.mark.parametrize("launched", [True, False])
def test_a_launched_process_gets_sigterm_when_its_launcher_dies(tmp_path, launched):
    """The middle process (a launcher) starts a child that ties itself to it, then is SIGKILLed: the child gets
    SIGTERM when launched, and lives on when started as from a shell."""
    child = textwrap.dedent(f"""
        import os, signal, sys, time
        from dit_lora.training import signals
        signal.signal(signal.SIGTERM, lambda *a: (open(sys.argv[1], "w").write("TERM"), sys.exit(0)))
        print(signals.watch_launcher(), flush=True)  # ready: after the handler, so the launcher's death finds it
        parent = os.getppid()
        for _ in range(300):  # until the launcher is gone (30 s at most): the kernel sends PR_SET_PDEATHSIG's
            time.sleep(0.02)  # SIGTERM as it exits, before this process is handed to a new parent
            if os.getppid() != parent:
                break
        time.sleep(0.2)  # the handler runs at the next bytecode; a margin, as the signal is already here
        open(sys.argv[1], "w").write("survived")
    """)
    launcher = textwrap.dedent("""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
        print(p.pid, p.stdout.readline().strip(), flush=True)
        time.sleep(60)
    """)
    env = {k: v for k, v in os.environ.items() if k not in (signals.LAUNCHED_VAR, "TORCHELASTIC_RUN_ID")}
    if launched:
        env[signals.LAUNCHED_VAR] = "1"
    result = tmp_path / "result"
    proc = subprocess.Popen([sys.executable, "-c", launcher, child, str(result)], stdout=subprocess.PIPE, text=True,
                            env=env)
    pid, how = proc.stdout.readline().split()
    assert how == ("prctl" if launched else "None")
    proc.kill()
    proc.wait()
    deadline = time.time() + 30
    while not (result.exists() and result.read_text()) and time.time() < deadline:  # created, then written
        time.sleep(0.1)
    assert result.read_text() == ("TERM" if launched else "survived")


@pytest.mark.parametrize("registered", [True, False])
def test_a_stop_signal_during_teardown_after_a_finished_run_keeps_its_exit_code(registered):
    """Issue 76: a Ctrl-C after a completed run (its summary written) reached the process in Python's finalization,
    which resets the handlers it installed to the default: the process died by SIGINT and `dit-lora launch` said
    "killed by SIGINT (exit 130)". The handlers' last atexit callback (signals.exiting) keeps the exit code. The signal
    comes from an object collected with the main module, after the handlers were reset."""
    code = textwrap.dedent(f"""
        import atexit, os, signal, sys, time
        from dit_lora.training import signals
        stop = signals.current(); stop.end()  # a recipe's handlers, train() returned
        if not {registered}:
            atexit.unregister(signals.exiting)

        class Late:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.3)

        late = Late()
        sys.exit(0)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == (0 if registered else -signal.SIGINT), proc.stderr


def test_a_second_signal_in_an_atexit_callback_still_stops_at_once():
    """Before the handlers' own last callback, a hung upload in another atexit callback stops at a second signal."""
    code = textwrap.dedent("""
        import atexit, os, signal, sys, time
        from dit_lora.training import signals
        stop = signals.current(); stop.end()

        def hung_upload():  # registered after the handlers: runs before their exiting()
            os.kill(os.getpid(), signal.SIGINT)
            stop.first_at -= signals.REPEAT_WINDOW_S + 1
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)

        atexit.register(hung_upload)
        sys.exit(0)
    """)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130 and time.monotonic() - started < 20, proc.stderr
    assert "again: stopped at once" in proc.stderr
