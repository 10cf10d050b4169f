"""kit/text_padding.py: the caption length every batch is cut to, measured once over the cache and
said once when it cuts."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from safetensors.torch import save_file

from dit_lora.kit.text_padding import cached_text_length


def _data(tmp_path, used: list[int], key="prompt_attention_mask", cached=True, padded=300):
    files = []
    for i, n in enumerate(used):
        mask = torch.zeros(padded, dtype=torch.long)
        mask[:n] = 1
        files.append(tmp_path / f"{i}.safetensors")
        save_file({key: mask}, str(files[-1]))
    return SimpleNamespace(cached=cached, cache_entries=lambda: files)


MAIN, OTHER = SimpleNamespace(is_main_process=True), SimpleNamespace(is_main_process=False)


def test_the_longest_cached_caption_rounded_up_and_one_line(tmp_path, capsys):
    assert cached_text_length(_data(tmp_path, [5, 17]), 300, MAIN, keep_flag="--trim_text_padding") == 24
    assert capsys.readouterr().out == (
        "caption tokens: the longest cached caption uses 24 of 300 padded tokens; every batch is cut to them (the "
        "rest is masked in every sample: --trim_text_padding false keeps it)\n"
    )
    assert cached_text_length(_data(tmp_path, [5], key="prompt_embeds_mask"), 300, MAIN, mask_key="prompt_embeds_mask") == 8
    assert capsys.readouterr().out.endswith("(the rest is masked in every sample)\n")  # no flag turns it off


def test_nothing_is_cut_uncached_or_turned_off_and_only_the_main_process_says_it(tmp_path, capsys):
    assert cached_text_length(_data(tmp_path, [5], cached=False), 300, MAIN) is None
    assert cached_text_length(_data(tmp_path, [5]), 300, MAIN, enabled=False) is None
    assert cached_text_length(_data(tmp_path, [5], key="other"), 300, MAIN) is None  # no mask in the cache
    assert cached_text_length(_data(tmp_path, [5]), 300, OTHER) == 8
    assert cached_text_length(_data(tmp_path, [300]), 300, MAIN) == 300  # all used: nothing to say
    assert capsys.readouterr().out == ""
