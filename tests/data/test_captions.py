"""Tests for dit_lora.data.captions: duplicate rows and captions cut to the text length, reported once."""

from __future__ import annotations

import json
from types import SimpleNamespace

from transformers import AutoTokenizer

from dit_lora.config import TrainConfig
from dit_lora.data import RawSample
from dit_lora.data.captions import (caption_lines, duplicate_line, token_counter_for_model,
                                    token_counter_from_components, truncation_line)
from dit_lora.registry import get_family


def _samples(captions: dict[str, str], repeat: dict[str, int] | None = None) -> list[RawSample]:
    out = []
    for key, caption in captions.items():
        out += [RawSample(key=key, caption=caption, path=f"/data/{key}")] * (repeat or {}).get(key, 1)
    return out


def test_duplicate_rows_are_counted_and_named_once():
    samples = _samples({f"{i}.png": "c" for i in range(8)}, repeat={"1.png": 3, **{f"{i}.png": 2 for i in range(2, 8)}})
    line = duplicate_line(samples)
    assert line.startswith("duplicates: 7 file(s) are listed by more than one metadata row (8 extra row(s)), so each "
                           "is trained on once per row every epoch: 1.png (x3), 2.png (x2), 3.png (x2), 4.png (x2), "
                           "5.png (x2) and 2 more.")
    assert duplicate_line(_samples({"a.png": "x", "b.png": "y"})) is None
    # Dataset rows have no file of their own to repeat.
    assert duplicate_line([RawSample(key="ds[0]", caption="x")] * 2) is None


def test_kohya_folder_repeats_are_not_duplicate_rows(tmp_path):
    from data_files import Log, make_image
    from dit_lora.data import load_samples

    make_image(tmp_path / "4_sks dog" / "a.png")
    (tmp_path / "4_sks dog" / "a.txt").write_text("a dog")
    samples = load_samples(train_data_dir=tmp_path, log=Log())
    assert len(samples) == 4 and duplicate_line(samples) is None


def _run_text(max_sequence_length, instruction=None):
    """A run's typed state holding its text settings (what Sana's ``SanaRun`` holds)."""
    from dit_lora.contract.capabilities import TextSettings

    return SimpleNamespace(text=TextSettings(max_sequence_length, instruction))


def test_truncation_is_judged_by_the_models_tokenizer_at_its_length(tiny_sana):
    tokenizer = AutoTokenizer.from_pretrained(tiny_sana, subfolder="tokenizer")
    comps = SimpleNamespace(encoders={"tokenizer": tokenizer}, state=_run_text(300))
    counter = token_counter_from_components(comps)
    long = "a photo of a cat " * 6000  # ~100,000 characters
    samples = _samples({"short.png": "a cat", "long.png": long, "edge.png": "word " * 299})
    ids = len(tokenizer("word " * 299)["input_ids"])
    line = truncation_line(samples, counter)
    assert line.startswith(f"long captions: {1 + (ids > 300)} of 3 caption(s) exceed the 300-token text length "
                           "(the model's tokenizer) and are cut to it; the model never sees the rest: long.png "
                           f"({len(long):,} characters, {len(tokenizer(long)['input_ids']):,} tokens)")
    assert "short.png" not in line
    # The complex human instruction leaves the caption one token fewer (SanaPipeline's max_length_all).
    exact = _samples({"exact.png": tokenizer.decode(tokenizer("x " * 400)["input_ids"][1:300])})
    n = counter.count([exact[0].caption])[0]
    assert truncation_line(exact, token_counter_from_components(
        SimpleNamespace(encoders={"tokenizer": tokenizer}, state=_run_text(n)))) is None
    assert truncation_line(exact, token_counter_from_components(SimpleNamespace(
        encoders={"tokenizer": tokenizer}, state=_run_text(n, instruction=("x",)))))
    # No caption tokens (DiT's class labels): nothing to judge.
    assert token_counter_from_components(SimpleNamespace(encoders={}, state=None)) is None


def test_check_data_counter_loads_only_the_tokenizer_or_estimates_and_says_so(tiny_sana, tmp_path):
    sana = get_family("sana")
    counter, note = token_counter_for_model(TrainConfig(pretrained_model_name_or_path=str(tiny_sana)), sana)
    assert note is None and counter.exact and counter.length == 300 and counter.limit == 299  # instruction on
    counter, _ = token_counter_for_model(TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tiny_sana),
                                                                complex_human_instruction=False,
                                                                max_sequence_length=120), sana)
    assert (counter.length, counter.limit) == (120, 120)
    counter, note = token_counter_for_model(TrainConfig(), sana)
    assert not counter.exact and counter.count(["x" * 1001]) == [251] and "estimated at 4 characters" in note
    line = truncation_line(_samples({"a.png": "x" * 2000}), counter)
    assert "(estimated at 4 characters a token) and would likely be cut" in line
    # CogVideoX: the text length is the transformer's; a folder without a tokenizer falls back and says why.
    (tmp_path / "cog" / "transformer").mkdir(parents=True)
    (tmp_path / "cog" / "transformer" / "config.json").write_text(json.dumps({"max_text_seq_length": 7}))
    counter, note = token_counter_for_model(TrainConfig(pretrained_model_name_or_path=str(tmp_path / "cog")),
                                            get_family("cogvideox"))
    assert counter.length == 7 and not counter.exact and "did not load" in note
    assert token_counter_for_model(TrainConfig(family="dit"), get_family("dit")) == (None, None)


def test_caption_lines_say_nothing_about_clean_data():
    assert caption_lines(_samples({"a.png": "a cat", "b.png": "a dog"}), None) == []


def test_caption_lines_are_computed_by_the_main_process_only(tmp_path, monkeypatch):
    """Counting every caption's tokens is work for the report: the ranks that do not log it skip it."""
    from dit_lora.data import prepare

    samples = [RawSample(key=f"{i}.png", caption="a caption", path=str(tmp_path / f"{i}.png")) for i in range(3)]
    media = SimpleNamespace(list_samples=lambda: samples, screen=lambda s, **_: s, cacheable=False,
                            raw_dataset=list, collate=None, groups=lambda s, **_: None)
    family = SimpleNamespace(data=SimpleNamespace(data_handler=lambda cfg, spec: media), setup=None)  # spec stand-in
    cfg = TrainConfig(output_dir=str(tmp_path / "out"), max_bad_samples_fraction=0.05)
    counted = []
    monkeypatch.setattr(prepare, "caption_lines", lambda s, counter: counted.append(len(s)) or [])
    for main in (False, True):
        accelerator = SimpleNamespace(is_main_process=main, process_index=0 if main else 1, num_processes=1,
                                      wait_for_everyone=lambda: None)
        prepare.prepare_data(cfg, family, None, accelerator)
    assert counted == [3]  # once, by the main process


def test_a_prefix_the_pipeline_puts_before_every_caption_counts_in_its_length():
    """Lumina 2's system prompt sits inside the same --max_sequence_length: a caption short on its own is cut once
    the prefix is counted with it, and the line says the prefix is in the count."""
    from dit_lora.data.captions import TokenCounter

    words = lambda captions: [len(c.split()) for c in captions]  # noqa: E731 - a word-counting stand-in tokenizer
    samples = [RawSample(key="a.png", caption="a red circle on blue")]
    alone = TokenCounter(words, 8, exact=True, what="words")
    prefixed = TokenCounter(words, 8, prefix="you draw shapes well ", exact=True, what="words")
    assert alone.count(["a red circle on blue"]) == [5] and prefixed.count(["a red circle on blue"]) == [9]
    assert truncation_line(samples, alone) is None
    line = truncation_line(samples, prefixed)
    assert "1 of 1 caption(s) exceed the 8-token text length" in line and "encodes with every caption" in line
