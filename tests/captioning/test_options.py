"""The caption command's options: each bad value one paragraph naming its flag; prompts from --prompt/--prompt_file
or the defaults per kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_lora.captioning.media import MediaFile
from dit_lora.captioning.options import DEFAULT_PROMPTS, CaptionOptions
from dit_lora.core.errors import UserError


def _options(**values):
    return CaptionOptions(**{"path": Path("."), "model": "Qwen/Qwen2.5-VL-7B-Instruct", **values})


def test_the_default_prompt_follows_the_kind_of_file():
    options = _options().resolved()
    assert options.prompt_for(MediaFile("a.JPG", Path("a.JPG"))) == DEFAULT_PROMPTS["image"]
    assert options.prompt_for(MediaFile("a.gif", Path("a.gif"))) == DEFAULT_PROMPTS["video"]  # a GIF is a clip
    assert options.prompt_for(MediaFile("a.mp4", Path("a.mp4"))) == DEFAULT_PROMPTS["video"]


def test_prompt_and_prompt_file_give_every_file_one_instruction(tmp_path):
    file = tmp_path / "p.txt"
    file.write_text("  Say what you see.\n")
    for options in (_options(prompt="Say what you see."), _options(prompt_file=str(file))):
        assert set(options.resolved().prompts.values()) == {"Say what you see."}


@pytest.mark.parametrize("values, flag", [
    ({"prompt": "a", "prompt_file": "b"}, "not both"),
    ({"max_new_tokens": 0}, "--max_new_tokens 0"),
    ({"batch_size": 0}, "--batch_size 0"),
    ({"num_frames": -1}, "--num_frames -1"),
    ({"dry_run": -2}, "--dry_run -2"),
    ({"caption_extension": "txt"}, "--caption_extension `txt`"),
    ({"caption_extension": ".png"}, "--caption_extension `.png`"),
    ({"caption_extension": ".JSONL"}, "--caption_extension `.JSONL`"),
    ({"caption_extension": "./../x"}, "--caption_extension `./../x`"),
    ({"max_pixels": -1}, "--max_pixels -1"),
    ({"model": None}, "needs a captioner"),
    ({"prompt_file": "/nonexistent/p.txt"}, "--prompt_file /nonexistent/p.txt cannot be read"),
])
def test_bad_values_are_refused_naming_the_flag(values, flag):
    with pytest.raises(UserError, match=flag.replace("(", r"\(")):
        _options(**values).resolved()


def test_an_empty_prompt_file_is_refused(tmp_path):
    (tmp_path / "p.txt").write_text("\n")
    with pytest.raises(UserError, match="is empty"):
        _options(prompt_file=str(tmp_path / "p.txt")).resolved()


def test_the_adapter_names_the_model_when_model_is_not_given(tmp_path):
    (tmp_path / "adapter_config.json").write_text('{"base_model_name_or_path": "Qwen/Qwen3-VL-8B-Instruct"}')
    assert _options(model=None, adapter=str(tmp_path)).resolved().model_path() == "Qwen/Qwen3-VL-8B-Instruct"
    (tmp_path / "adapter_config.json").write_text('{"base_model_name_or_path": "models/../qwen"}')  # relative
    with pytest.raises(UserError, match=r"trained from `models/../qwen` .*which is not here.*--model"):
        _options(model=None, adapter=str(tmp_path)).resolved().model_path()
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(UserError, match="Pass the base with --model"):
        _options(model=None, adapter=str(tmp_path)).resolved().model_path()


@pytest.mark.parametrize("flag", ["model", "adapter"])
def test_a_local_path_that_does_not_exist_is_refused_and_a_hub_id_is_not(flag, tmp_path):
    with pytest.raises(UserError, match=f"--{flag} {tmp_path}/nope does not exist"):
        _options(**{flag: str(tmp_path / "nope")}).resolved()
    assert _options(**{flag: "owner/name"}).resolved()  # fetched when loading


def test_the_journal_options_are_what_shapes_a_caption():
    base = _options().resolved().journal_options()
    assert _options(prefix="sks, ").resolved().journal_options() != base
    assert _options(batch_size=8, dry_run=0, device="cpu").resolved().journal_options() == base  # speed only
    # how much of a file the model sees, and how it is stored: what a rerun lowers to get a file through
    assert _options(max_pixels=409600, num_frames=4, quantize_base="nf4",
                    mixed_precision="no").resolved().journal_options() == base
