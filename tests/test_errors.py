"""`format_error` wraps a message into one paragraph without ever splitting a word a user copies."""

from __future__ import annotations

import pytest

from dit_lora.errors import UserError, format_error


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
