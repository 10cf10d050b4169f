"""``dit-lora caption`` on the command line: its flags (from the options' fields), one paragraph for an unknown
flag or a bad path, the exit status (1 when a file failed), and ``--training_file``."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from dit_lora.captioning.options import CaptionOptions
from dit_lora.commands.cli import _build_parser, main
from helpers import ROOT


def test_every_option_is_a_flag_with_its_help():
    parser = _build_parser()
    text = subprocess.run([sys.executable, "-m", "dit_lora", "caption", "--help"], capture_output=True, text=True,
                          cwd=ROOT, check=True).stdout
    for f in CaptionOptions.flags():
        assert (f.name == "path" and "path" in text) or f"--{f.name}" in text, f.name
    args = parser.parse_args(["caption", "folder", "--model", "m", "--dry_run", "--metadata"])
    assert args.dry_run == 3 and args.metadata and args.batch_size == 1 and args.max_new_tokens == 200
    assert {f.name for f in fields(CaptionOptions)} - {f.name for f in CaptionOptions.flags()} == {"prompts"}


def test_help_imports_no_torch():
    code = "import sys; from dit_lora.commands.cli import _build_parser; _build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          check=True).stdout.strip() == "False"


@pytest.mark.parametrize("argv, said", [
    (["caption", "x", "--model", "m", "--bogus"], "unknown argument(s) --bogus"),
    (["caption", "/nonexistent/folder", "--model", "owner/model"], "`/nonexistent/folder` does not exist"),
    (["caption", ".", "--model", "/nonexistent/model"], "--model /nonexistent/model does not exist"),
])
def test_bad_input_is_one_paragraph(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code != 0 and said in capsys.readouterr().err


def test_training_file_from_the_command_line(tmp_path, capsys):
    (tmp_path / "a.png").write_bytes(b"x")
    (tmp_path / "a.txt").write_text("my caption")
    with pytest.raises(SystemExit) as exit_:
        main(["caption", str(tmp_path), "--training_file", "own.jsonl"])
    assert exit_.value.code == 0 and "1 conversation(s)" in capsys.readouterr().out
    assert (tmp_path / "own.jsonl").is_file()


def test_a_failed_file_exits_1_and_names_it(tmp_path, capsys):
    from dit_lora.families.videollm.spec import build_demo_model

    tiny = build_demo_model("qwen2_5_vl", tmp_path / "tiny")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "broken.png").write_bytes(b"not an image")
    with pytest.raises(SystemExit) as exit_:
        main(["caption", str(folder), "--model", str(tiny), "--mixed_precision", "no", "--device", "cpu"])
    out = capsys.readouterr().out
    assert exit_.value.code == 1 and "1 failed" in out and "failed: broken.png: not a readable image" in out
    assert "mend or delete them" in out
