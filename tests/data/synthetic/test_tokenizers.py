"""``dit_lora/data/synthetic/tokenizers.py``: the demo tokenizers' shared words and the T5-style tokenizer, which the
CogVideoX and Wan demos build (neither family's demo imports the other's)."""

from __future__ import annotations

from dit_lora.data.synthetic.tokenizers import T5_MAX_LENGTH, TOKENIZER_CORPUS_EXTRA, build_tiny_t5_tokenizer


def test_the_families_demos_use_the_shared_pieces():
    from dit_lora.families.cogvideox import demo as cogvideox_demo
    from dit_lora.families.sana import demo as sana_demo

    assert cogvideox_demo.build_tiny_t5_tokenizer is build_tiny_t5_tokenizer
    assert sana_demo.TOKENIZER_CORPUS_EXTRA is TOKENIZER_CORPUS_EXTRA


def test_the_t5_tokenizer_is_deterministic_and_knows_the_demo_words():
    first, second = build_tiny_t5_tokenizer(), build_tiny_t5_tokenizer()
    assert first.get_vocab() == second.get_vocab()
    assert first.model_max_length == T5_MAX_LENGTH
    ids = first("a red square", add_special_tokens=False).input_ids
    assert len(ids) == 3 and first.unk_token_id not in ids  # each known word is one token
    assert first.pad_token_id == 0 and first.eos_token_id == 1
