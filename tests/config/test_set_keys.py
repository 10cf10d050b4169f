"""config/set_keys.py: the family handler's paragraphs about a data set name its options as the set's file writes
them (the key, the value in the file's syntax), never as flags that would not reach the set."""

from __future__ import annotations

from dit_lora.config.set_keys import in_set_terms, said

OPTIONS = ("train_data_dir", "caption_extension", "instance_prompt", "resolution")


def test_a_flag_and_its_value_become_the_sets_key_in_the_files_syntax():
    text = ("4 image(s) in --train_data_dir '/data/img' have no caption: give them all one caption with "
            "--instance_prompt. The .txt files beside them are read with --caption_extension .txt.")
    assert in_set_terms(text, OPTIONS, {"train_data_dir": "image_directory"}, toml=True) == (
        '4 image(s) in `image_directory = "/data/img"` have no caption: give them all one caption with '
        '`instance_prompt`. The .txt files beside them are read with `caption_extension = ".txt"`.')
    assert in_set_terms("read with --caption_extension .txt.", OPTIONS, {"caption_extension": "caption_ext"},
                        toml=False) == "read with `caption_ext: .txt`."


def test_pass_a_flag_is_set_the_key_in_the_set_and_run_options_stay_flags():
    line = "those are not read; pass --caption_extension .txt to use them; --random_flip holds for the run"
    assert in_set_terms(line, OPTIONS, {}, toml=True) == (
        'those are not read; set `caption_extension = ".txt"` in the set to use them; --random_flip holds for the run')
    # a word after the flag is the sentence's, not its value; a number stays a number
    assert in_set_terms("--train_data_dir or --resolution 512", OPTIONS, {}, toml=True) == (
        "`train_data_dir` or `resolution = 512`")
    assert said("num_repeats", 0, toml=True) == "num_repeats = 0" and said("repeats", 0, toml=False) == "repeats: 0"


def test_a_word_is_a_value_only_among_the_options_choices():
    line = "frame sampling first: ...; --frame_sampling uniform spreads them over the whole clip"
    choices = {"frame_sampling": ("uniform", "first")}
    assert in_set_terms(line, ["frame_sampling"], {}, toml=True, choices=choices) == (
        'frame sampling first: ...; `frame_sampling = "uniform"` spreads them over the whole clip')
    assert in_set_terms("--frame_sampling spreads", ["frame_sampling"], {}, toml=True, choices=choices) == (
        "`frame_sampling` spreads")


def test_the_sentences_colon_after_a_value_stays_the_sentences():
    line = "checking 4 sample(s) at resolution 64 (--aspect_buckets 64x64: every image cropped to 64x64) ..."
    assert in_set_terms(line, ["aspect_buckets"], {}, toml=True) == (
        'checking 4 sample(s) at resolution 64 (`aspect_buckets = "64x64"`: every image cropped to 64x64) ...')
