"""`format_error` wraps a message into one paragraph without ever splitting a word a user copies."""

from __future__ import annotations

import sys

import pytest

from dit_lora.core.errors import UserError, format_error


@pytest.mark.parametrize("prefix", range(0, 100, 7))
def test_commands_and_paths_survive_wrapping_at_any_offset(prefix):
    command = "dit-lora launch recipes/sana_lora.py --config /a/very-long-folder/with-hyphens/recipes/demo.yaml"
    path = "/" + "x" * 130 + "/model-file.safetensors"
    message = format_error(UserError(f"{'w ' * prefix}run `{command}` and read {path} --resume_from_checkpoint"))
    words = message.split()
    assert words[0] == "error:"
    for piece in [*command.split(), path, "--resume_from_checkpoint"]:
        assert piece in words or f"`{piece}" in words or f"{piece}`" in words
    assert all(len(line) <= 100 for line in message.splitlines() if path not in line)
    assert "\n\n" not in message


def test_whitespace_in_the_message_collapses_to_one_paragraph():
    assert format_error(UserError("one\n\n  two\tthree")) == "error: one two three"


def test_a_user_error_leaves_the_process_group_before_exiting(tmp_path, monkeypatch):
    """A UserError in a multi-process run exits with its code through os._exit, not an abort from a gloo destructor
    (a one-process gloo group here)."""
    import pytest
    import torch.distributed as dist

    from dit_lora.core.errors import UserError, run_cli

    from dit_lora.core import errors

    def exit_process(code):  # os._exit would end pytest: the group is left to the test, which tears it down
        dist.destroy_process_group()
        sys.exit(code)

    monkeypatch.setattr(errors, "_exit_process", exit_process)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29531")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)

    def main():
        raise UserError("refused")

    with pytest.raises(SystemExit) as done:
        run_cli(main)
    assert done.value.code == 2 and not dist.is_initialized()


def test_every_ending_leaves_the_process_group_before_exiting(tmp_path, monkeypatch, capsys):
    """A finished run, a stopped one and a broken one end through os._exit without destroying the group (a finished
    two-process run sometimes ended as exit 134, "terminate called without an active exception", from a gloo
    destructor, at teardown or shutdown); the broken one prints its traceback first and ends with 1 (the launcher
    stops a rank as soon as another ends: a traceback printed after a teardown was sometimes lost). Outside a group
    an unexpected error propagates."""
    import pytest
    import torch.distributed as dist

    from dit_lora.core import errors
    from dit_lora.core.errors import Interrupted, run_cli

    ended: list[tuple[int, bool]] = []

    def exit_process(code):  # what os._exit would find: the group still up (no destructor runs after os._exit)
        ended.append((code, dist.is_initialized()))
        dist.destroy_process_group()
        sys.exit(code)

    monkeypatch.setattr(errors, "_exit_process", exit_process)

    def stopped():
        raise Interrupted("stopped: saved checkpoint-3", 143)

    def broken():
        raise RuntimeError("unexpected")

    for n, (main, code) in enumerate([(lambda: 0, 0), (stopped, 143), (broken, 1)]):
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / f'rendezvous{n}'}", rank=0, world_size=1)
        with pytest.raises(SystemExit) as done:
            run_cli(main)
        assert done.value.code == code
        assert not dist.is_initialized()
    # a process that was in a group ends with os._exit, its group not destroyed (destroying it is what aborted)
    assert ended == [(0, True), (143, True), (1, True)]
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: unexpected" in err
    with pytest.raises(RuntimeError, match="unexpected"):  # no group: the interpreter prints it
        run_cli(broken)


def test_a_traceback_reported_early_is_not_printed_again(tmp_path, monkeypatch, capsys):
    """The main process prints an unexpected error's traceback before the other processes hear of it
    (core/collective.main_process_check); leaving the group, it is not printed a second time."""
    import torch.distributed as dist

    from dit_lora.core import errors
    from dit_lora.core.errors import report_traceback, run_cli

    def exit_process(code):
        dist.destroy_process_group()
        sys.exit(code)

    monkeypatch.setattr(errors, "_exit_process", exit_process)

    def broken():
        try:
            raise OSError(5, "Input/output error")
        except OSError as err:
            report_traceback(err)
            raise

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    with pytest.raises(SystemExit) as done:
        run_cli(broken)
    err = capsys.readouterr().err
    assert done.value.code == 1 and err.count("Traceback (most recent call last)") == 1 and "Input/output error" in err
