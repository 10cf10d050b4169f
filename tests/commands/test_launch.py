"""``dit-lora launch`` (and plain ``accelerate launch``) on real launcher subprocesses: exit codes, signals,
no training process outliving its launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import ROOT, base_args

from dit_lora.commands import launch
from dit_lora.core.errors import UserError
from dit_lora.commands.launch import FORWARDED, _exit_code, run_process


@pytest.fixture(autouse=True)
def _launch_env_is_restored(monkeypatch):
    """An in-process `launch.main` marks os.environ as launched (for its children); undo it after each test, or every
    later test in the worker sees a launched run (its resume command then names this test's launch options)."""
    from dit_lora.training.signals import LAUNCHED_VAR

    for name in (LAUNCHED_VAR, LAUNCHED_VAR + "_COMMAND", launch.LAUNCH_PRECISION_VAR):
        monkeypatch.setenv(name, "")  # recorded as absent before: restored to absent at teardown
        monkeypatch.delenv(name)

DIT_LORA_LAUNCH = [sys.executable, "-m", "dit_lora.commands.cli", "launch"]
ACCELERATE_LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]
LAUNCH_OPTS = ["--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--num_cpu_threads_per_process", "1"]
RECIPE = str(ROOT / "recipes" / "sana_lora.py")


def test_exit_codes_as_a_shell_reports_them():
    assert [_exit_code(c) for c in (0, 2, 3, -15, -2, -9)] == [0, 2, 3, 143, 130, 137]


def test_run_process_returns_the_childs_code_and_forwards_sigterm(tmp_path):
    assert run_process([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ)) == 3
    # A child that saves on SIGTERM: the launcher (this process) gets SIGTERM once the child's handler is in place
    # (its ready file), forwards it and waits.
    ready = tmp_path / "ready"
    child = textwrap.dedent(f"""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), open({str(tmp_path / 'saved')!r}, "w").close(),
                                                 sys.exit(143)))
        open({str(ready)!r}, "w").close()
        time.sleep(60)
    """)
    timer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        deadline = time.time() + 60
        while not Path({str(ready)!r}).exists() and time.time() < deadline:
            time.sleep(0.05)
        os.kill({os.getpid()}, 15)
    """)])
    before = {sig: signal.getsignal(sig) for sig in FORWARDED}
    try:
        started = time.time()
        code = run_process([sys.executable, "-c", child], dict(os.environ))
    finally:
        timer.wait()
    assert code == 143 and (tmp_path / "saved").exists() and time.time() - started < 50
    assert {sig: signal.getsignal(sig) for sig in FORWARDED} == before  # the launcher's handlers are given back


@pytest.mark.slow
def test_run_process_leaves_an_ignored_sighup_ignored(capfd):
    """Under nohup (SIGHUP ignored) the launcher neither takes SIGHUP over nor passes it on: the child starts with it
    ignored, and a SIGHUP to the launcher changes nothing."""
    child = textwrap.dedent("""
        import os, signal, sys, time
        ignored = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        os.kill(os.getppid(), signal.SIGHUP)
        time.sleep(1)
        sys.exit(0 if ignored else 5)
    """)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert run_process([sys.executable, "-c", child], dict(os.environ)) == 0
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert "received SIGHUP" not in capfd.readouterr().err


def test_run_process_names_a_kill_by_signal(capfd):
    assert run_process([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], dict(os.environ)) == 137
    assert "killed by SIGKILL (exit 137)" in capfd.readouterr().err


def _user_error_args(tmp_path, tiny_sana, shapes_data):
    return base_args(tiny_sana, shapes_data, tmp_path / "out", tmp_path / "cache",
                     resume_from_checkpoint=str(tmp_path / "no-such-checkpoint"))


@pytest.mark.slow
def test_dit_lora_launch_exits_2_with_one_paragraph_on_a_user_error(tmp_path, tiny_sana, shapes_data):
    proc = subprocess.run([*DIT_LORA_LAUNCH, *LAUNCH_OPTS, RECIPE, *_user_error_args(tmp_path, tiny_sana, shapes_data)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "does not exist" in " ".join(text.split())  # the paragraph wraps wherever the tmp path's length puts it
    assert "Traceback" not in text and "CalledProcessError" not in text
    assert text.count("error:") == 1 and "returned non-zero exit status" not in text


@pytest.mark.slow
def test_plain_accelerate_launch_loses_the_code_dit_lora_launch_keeps_it_under_torchrun(tmp_path, tiny_sana,
                                                                                       shapes_data):
    """What dit-lora launch is for: accelerate launch turns the user error into exit 1 and a traceback; under
    torchrun (--multi_gpu, 2 processes on CPU) dit-lora launch keeps exit 2, without a traceback."""
    from helpers import free_port

    args = _user_error_args(tmp_path, tiny_sana, shapes_data)
    plain = subprocess.run([*ACCELERATE_LAUNCH, *LAUNCH_OPTS, RECIPE, *args], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
    assert plain.returncode == 1 and "CalledProcessError" in plain.stderr  # accelerate's own behaviour
    multi = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
             "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    proc = subprocess.run([*DIT_LORA_LAUNCH, *multi, RECIPE, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "does not exist" in " ".join(text.split()) and "Traceback" not in text and "ChildFailedError" not in text


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_training(launcher, tmp_path, tiny_sana, shapes_data):
    out = tmp_path / "out"
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=100000, resolution=32,
                     train_batch_size=2)
    proc = subprocess.Popen([*launcher, *LAUNCH_OPTS, RECIPE, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = ""
    while "step 1/" not in seen:  # the training loop has started (the progress line after update 1)
        char = proc.stdout.read(1)
        assert char, seen
        seen += char
    (child,) = _children(proc.pid)
    return proc, child, out, seen


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_dit_lora_launch_saves_and_ends_both_processes(tmp_path, tiny_sana, shapes_data):
    proc, child, out, seen = _start_training(DIT_LORA_LAUNCH, tmp_path, tiny_sana, shapes_data)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    text = seen + rest
    assert proc.returncode == 143, text
    assert not _alive(child) and "Traceback" not in text
    (checkpoint,) = out.glob("checkpoint-*")
    assert (checkpoint / "dit_lora_checkpoint_complete.json").is_file()
    assert f"saved {checkpoint}" in text and "dit-lora launch --num_processes 1" in text  # the resume command


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_plain_accelerate_launch_does_not_leave_the_training_running(tmp_path, tiny_sana, shapes_data):
    """accelerate launch dies at once on SIGTERM; its training process gets the launcher's death as a SIGTERM
    (PR_SET_PDEATHSIG), saves a checkpoint and ends instead of training on as an orphan."""
    proc, child, out, _ = _start_training(ACCELERATE_LAUNCH, tmp_path, tiny_sana, shapes_data)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    deadline = time.time() + 120
    while _alive(child) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(child)
    (checkpoint,) = out.glob("checkpoint-*")
    assert (checkpoint / "dit_lora_checkpoint_complete.json").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_dit_lora_launch_multi_process_saves_one_checkpoint_and_ends_all(tmp_path, tiny_sana,
                                                                                   shapes_data):
    """Under torchrun (--multi_gpu, 2 processes on CPU): the agent passes the signal to both training processes,
    they agree on a step, save one checkpoint and exit; the launcher exits 143 after them."""
    from helpers import free_port

    multi = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
             "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    out = tmp_path / "out"
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=100000, resolution=32,
                     train_batch_size=2)
    proc = subprocess.Popen([*DIT_LORA_LAUNCH, *multi, RECIPE, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    seen = ""
    while "step 1/" not in seen:
        char = proc.stdout.read(1)
        assert char, seen
        seen += char
    workers = _children(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    text = seen + rest
    assert proc.returncode == 143, text
    assert not any(_alive(pid) for pid in workers) and "Traceback" not in text
    (checkpoint,) = out.glob("checkpoint-*")
    assert {p.name for p in checkpoint.glob("trainer_state_rank*.json")} == {"trainer_state_rank0.json",
                                                                            "trainer_state_rank1.json"}
    assert (checkpoint / "dit_lora_checkpoint_complete.json").is_file() and f"saved {checkpoint}" in text


MULTI_ARGV = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no", "x.py"]


@pytest.mark.parametrize("user_timeout", [None, "60"])
@pytest.mark.parametrize("nohup", [False, True])
def test_multi_process_launch_waits_for_the_stops_save_unless_the_user_set_a_timeout(monkeypatch, user_timeout,
                                                                                     nohup):
    """torchrun's agent SIGKILLs the processes TORCH_ELASTIC_SHUTDOWN_TIMEOUT (30 s) after a stop signal: dit-lora
    launch raises it unless the user set it, and keeps 30 s for the shutdown after a failure. Under nohup the agent
    is told not to handle SIGHUP (torchrun's --signals_to_handle), so it stays ignored."""
    env = {k: v for k, v in os.environ.items() if k not in (launch.SHUTDOWN_TIMEOUT_VAR, "PET_SIGNALS_TO_HANDLE")}
    if user_timeout:
        env[launch.SHUTDOWN_TIMEOUT_VAR] = user_timeout
    monkeypatch.setattr(os, "environ", env)  # main writes the launch variables; the test's own stay as they were
    seen = {}
    monkeypatch.setattr(launch, "_torchrun", lambda args, **kw: seen.update(env=dict(os.environ), **kw) or 0)
    monkeypatch.setattr(signal, "getsignal", lambda sig: signal.SIG_IGN if nohup and sig == signal.SIGHUP
                        else signal.SIG_DFL)
    assert launch.main(MULTI_ARGV) == 0
    assert seen["env"][launch.SHUTDOWN_TIMEOUT_VAR] == (user_timeout or str(launch.STOP_TIMEOUT_S))
    assert launch.STOP_TIMEOUT_S >= 3600
    assert seen["failure_timeout"] == (None if user_timeout else 30)
    handled = seen["env"].get("PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT").split(",")
    assert ("SIGHUP" in handled) is not nohup and "SIGTERM" in handled and "SIGINT" in handled


def test_the_agents_long_wait_is_for_a_stop_only(monkeypatch):
    """The agent closes its processes inside ``except SignalException`` for a stop: they get the variable's wait
    (also from a torch that does not read it, before 2.12); otherwise (after a failure) the wait stays bounded, so a
    failed run is reported soon."""
    from torch.distributed.elastic.multiprocessing import SignalException, api

    monkeypatch.setenv(launch.SHUTDOWN_TIMEOUT_VAR, "14400")
    waits = []
    context = type("Ctx", (), {"_close": lambda self, death_sig, timeout: waits.append(timeout), "_tail_logs": [],
                               "filtered_stdout": None, "filtered_stderr": None})()
    with launch._AgentWatch([], failure_timeout=30) as watch:
        api.PContext.close(context, signal.SIGTERM, 14400)
        try:
            raise SignalException("stop", signal.SIGTERM)
        except SignalException:
            api.PContext.close(context, signal.SIGTERM, 30)
    assert waits == [30, 14400] and watch.contexts == [context]
    assert api.PContext.close is watch.original  # torch's own again


def test_a_stopped_multi_process_run_reports_the_processes_own_codes():
    assert launch._stopped_code(15, [143, 143]) == 143
    assert launch._stopped_code(15, [143, 2]) == 2  # a full disk during the stop's save
    assert launch._stopped_code(15, [137, 143]) == 137  # killed
    assert launch._stopped_code(2, [0, 130]) == 130 and launch._stopped_code(15, [0, 0]) == 0
    assert launch._stopped_code(15, None) == 143  # the codes could not be read


WORKER = textwrap.dedent("""
    import os, signal, sys, time
    def stop(*args):  # a save that takes SAVE_S seconds, then the stop's exit code (or a failure's)
        time.sleep(float(os.environ["SAVE_S"]))
        open(os.path.join(sys.argv[1], "saved" + os.environ["RANK"]), "w").close()
        sys.exit(int(os.environ["CODE"]))
    signal.signal(signal.SIGTERM, stop)
    os.write(1, f"ready {os.environ['RANK']}\\n".encode())  # one write: the two processes share the pipe
    time.sleep(120)
""")


@pytest.mark.slow
@pytest.mark.parametrize("user_timeout,save_s,code,expected", [
    ("1", 3, 143, 137),  # the user's 1 s: the agent SIGKILLs the saving processes, and the launcher says so
    (None, 3, 143, 143),  # ours: the save completes
    (None, 0.2, 2, 2),  # a failure during the stop's save (a full disk) is not reported as the stop's 143
])
def test_sigterm_to_a_multi_process_launch_waits_and_reports_the_processes_codes(tmp_path, user_timeout, save_s,
                                                                                code, expected):
    from helpers import free_port

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if k != launch.SHUTDOWN_TIMEOUT_VAR}
    env.update(SAVE_S=str(save_s), CODE=str(code), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    if user_timeout:
        env[launch.SHUTDOWN_TIMEOUT_VAR] = user_timeout
    cmd = [*DIT_LORA_LAUNCH, *MULTI_ARGV[:-1], "--main_process_port", str(free_port()), str(script), str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = ""
    while not ("ready 0" in seen and "ready 1" in seen):  # both handlers are in place
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    proc.send_signal(signal.SIGTERM)
    try:
        text = seen + proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        for pid in [*_children(proc.pid), proc.pid]:
            os.kill(pid, signal.SIGKILL)
        pytest.fail("the launcher did not end within 60 s of SIGTERM:\n" + seen + proc.communicate()[0])
    assert proc.returncode == expected, text
    assert sorted(p.name for p in tmp_path.glob("saved*")) == ([] if expected == 137 else ["saved0", "saved1"])
    assert "received SIGTERM: passed to the training processes" in text, text
    assert "Sending process" not in text and "death signal" not in text and "Traceback" not in text, text
    assert ("did not exit within 1 s" in text) is (expected == 137), text


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_launch_with_the_scripts_help_flag_shows_dit_loras_options_in_process(flag, capsys):
    # accelerate's parser leaves the flag to the script; the page is dit-lora's, with no launch-defaults warning first
    from dit_lora.training import signals

    try:
        assert launch.main([RECIPE, flag]) == 0
    finally:  # the script's recipe.main installs its stop handlers for the process: this one goes on as the worker
        signals.release()
    out, err = capsys.readouterr()
    assert "usage: sana_lora.py" in out and "--rank" in out and "--train_data_dir" in out
    assert "accelerate" not in err


def test_launch_module_help_and_no_help_request(capsys):
    from dit_lora.training import signals

    try:
        assert launch.main(["-m", "dit_lora", "train", "-h"]) == 0
    finally:  # `dit-lora train` installs its stop handlers for the process: this one goes on as the worker
        signals.release()
    assert "usage: dit-lora train" in capsys.readouterr().out
    from accelerate.commands.launch import launch_command_parser

    args = launch_command_parser().parse_args([RECIPE, "--validation_prompt", "a cat"])
    assert launch.script_help(args) is None  # a run: left to accelerate's launcher


def test_the_launch_options_mixed_precision_is_read_and_passed_to_the_run(monkeypatch):
    """`dit-lora launch --mixed_precision fp16 recipe.py ...` (kohya users' habit): the launcher's value reaches the
    training process under LAUNCH_PRECISION_VAR (accelerate's own ACCELERATE_MIXED_PRECISION is always set, from its
    config's default too, so it cannot tell an explicit choice); a recipe option of that name is not the launcher's."""
    assert launch.launch_precision(["--mixed_precision", "fp16", "--num_processes", "1"]) == "fp16"
    assert launch.launch_precision(["--mixed_precision=no"]) == "no"
    assert launch.launch_precision(["--num_processes", "1"]) is None
    seen = {}
    monkeypatch.setattr(launch, "run_process", lambda cmd, env: seen.update(env) or 0)
    monkeypatch.setenv(launch.LAUNCH_PRECISION_VAR, "bf16")  # an outer launch's value: not this launch's
    assert launch.main(["--num_processes", "1", RECIPE, "--mixed_precision", "fp16"]) == 0
    assert launch.LAUNCH_PRECISION_VAR not in seen
    assert launch.main(["--mixed_precision", "fp16", "--num_processes", "1", RECIPE, "--rank", "4"]) == 0
    assert seen[launch.LAUNCH_PRECISION_VAR] == "fp16"


def test_a_launchers_fp16_is_refused_and_another_difference_said_in_one_line(monkeypatch):
    lines = []
    monkeypatch.delenv(launch.LAUNCH_PRECISION_VAR, raising=False)
    launch.check_launch_precision("bf16", lines.append)  # plain `dit-lora launch`: nothing to say
    monkeypatch.setenv(launch.LAUNCH_PRECISION_VAR, "bf16")
    launch.check_launch_precision("bf16", lines.append)  # the same: nothing to say
    assert lines == []
    monkeypatch.setenv(launch.LAUNCH_PRECISION_VAR, "fp16")
    with pytest.raises(UserError) as err:
        launch.check_launch_precision("bf16", lines.append)
    text = str(err.value)
    assert "accelerate's launch option" in text and "bf16 for this run" in text
    assert "`--mixed_precision fp16 --allow_fp16` after the script path" in text
    monkeypatch.setenv(launch.LAUNCH_PRECISION_VAR, "no")
    launch.check_launch_precision("bf16", lines.append)
    assert len(lines) == 1 and lines[0].startswith("mixed precision: bf16, the run's --mixed_precision")
    assert "--mixed_precision no is accelerate's and not used" in lines[0]


def test_a_run_launched_with_fp16_is_refused_before_the_model_loads(tmp_path, tiny_sana, shapes_data, monkeypatch):
    """In process, as the training process of `dit-lora launch --mixed_precision fp16` sees it."""
    from dit_lora.commands.recipe import run_recipe

    from dit_lora.training import signals

    monkeypatch.setenv(launch.LAUNCH_PRECISION_VAR, "fp16")
    argv = base_args(tiny_sana, shapes_data, tmp_path / "out", tmp_path / "cache", mixed_precision="bf16")
    try:
        with pytest.raises(UserError, match="accelerate's launch option"):
            run_recipe(None, argv)
    finally:  # a recipe's process installs its stop handlers for life: this one goes on as the test worker
        signals.release()
    assert not (tmp_path / "cache").exists()  # nothing encoded: refused at start
