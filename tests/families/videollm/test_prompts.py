"""families/videollm/prompts.py: answer-only chat examples (only the answers are labelled), the generation prompt
that is their prefix, template fallbacks and padding (the tiny LLaVA-NeXT-Video tokenizer, CPU, no downloads)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.families.videollm.llava_next_video import LlavaNextVideoSpec
from dit_lora.families.videollm.prompts import (
    IGNORE_INDEX,
    ChatTemplateError,
    build_generation_prompt,
    build_training_example,
    pad_batch,
)

from conversations import MULTI, SINGLE

SPEC = LlavaNextVideoSpec()


# Written for this test in the layout of the llava-hf LLaVA-NeXT-Video templates: it iterates
# list content only (string content would render nothing), writes no BOS, and ends answers with a
# space instead of an end-of-turn token.
LLAVA_HF_STYLE_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'video') %}{{ '<video>\\n' }}{% endfor %}"
    "{% if message['role'] != 'assistant' %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'text') %}{{ part['text'] + ' ' }}{% endfor %}"
    "{% else %}{% for part in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ part['text'] + ' ' }}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def _answer_runs(example) -> list[list[int]]:
    """Contiguous runs of labelled tokens."""
    runs, current = [], []
    for token, label in zip(example["input_ids"].tolist(), example["labels"].tolist()):
        if label != IGNORE_INDEX:
            assert label == token
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


def _example(tokenizer, model, messages, count=16, **kwargs):
    return build_training_example(
        tokenizer,
        messages,
        video_placeholder=SPEC.video_placeholder,
        video_token_id=model.config.video_token_id,
        video_token_count=count,
        **kwargs,
    )


def test_single_turn_labels_only_the_answer(tokenizer, model):
    ex = _example(tokenizer, model, SINGLE)
    ids, labels = ex["input_ids"], ex["labels"]
    assert ids.dtype == labels.dtype == ex["attention_mask"].dtype == torch.long
    assert ids.dim() == 1 and ex["attention_mask"].eq(1).all()
    runs = _answer_runs(ex)
    assert [tokenizer.decode(run) for run in runs] == [" The square is red." + tokenizer.eos_token]
    assert runs[0][-1] == tokenizer.eos_token_id
    video = ids == model.config.video_token_id
    assert int(video.sum()) == 16 and labels[video].eq(IGNORE_INDEX).all()
    # Everything before the answer is masked: it is exactly the generation prompt.
    first = int((labels != IGNORE_INDEX).nonzero()[0])
    assert labels[:first].eq(IGNORE_INDEX).all() and labels[first:].ne(IGNORE_INDEX).all()
    assert int((ids == tokenizer.bos_token_id).sum()) == 1 and ids[0] == tokenizer.bos_token_id
    # The video tokens are contiguous and sit where the template put "<video>".
    positions = video.nonzero().flatten()
    assert positions[-1] - positions[0] == 15
    assert tokenizer.decode(ids[: positions[0]]) == "<s>[INST] "


def test_multi_turn_with_system_unmasks_each_answer(tokenizer, model):
    ex = _example(tokenizer, model, MULTI, count=8)
    eos = tokenizer.eos_token
    assert [tokenizer.decode(run) for run in _answer_runs(ex)] == [
        " The square is red." + eos, " It moves left to right." + eos]
    masked = tokenizer.decode([t for t, l in zip(ex["input_ids"].tolist(), ex["labels"].tolist()) if l == IGNORE_INDEX])
    assert "You are a helpful assistant." in masked  # the system prompt is there, masked
    assert "Which way does the square move?" in masked
    assert int((ex["input_ids"] == model.config.video_token_id).sum()) == 8
    assert int((ex["input_ids"] == tokenizer.bos_token_id).sum()) == 1


def test_generation_prompt_is_the_training_prefix(tokenizer, model):
    kwargs = dict(video_placeholder=SPEC.video_placeholder, video_token_id=model.config.video_token_id,
                  video_token_count=8)
    ex = _example(tokenizer, model, MULTI, count=8)
    labelled = (ex["labels"] != IGNORE_INDEX).nonzero().flatten().tolist()
    first = labelled[0]
    prompt = build_generation_prompt(tokenizer, MULTI[:2], **kwargs)
    assert torch.equal(prompt["input_ids"], ex["input_ids"][:first])
    assert prompt["attention_mask"].eq(1).all() and prompt["input_ids"].dim() == 1
    # Second turn: the history (first answer included) is tokenized identically.
    second = [i for i in labelled if i - 1 not in labelled][1]
    prompt2 = build_generation_prompt(tokenizer, MULTI[:4], **kwargs)
    assert torch.equal(prompt2["input_ids"], ex["input_ids"][:second])
    with pytest.raises(ValueError, match="end with a user turn"):
        build_generation_prompt(tokenizer, MULTI, **kwargs)


def test_prompt_errors(tokenizer, model):
    with pytest.raises(ValueError, match=r"--max_sequence_length 20") as info:
        _example(tokenizer, model, SINGLE, max_length=20)
    length = len(_example(tokenizer, model, SINGLE)["input_ids"])
    assert f"{length} tokens" in str(info.value)
    assert len(_example(tokenizer, model, SINGLE, max_length=length)["input_ids"]) == length
    # Two placeholders: one from the template, one typed by the user.
    two = [{"role": "user", "content": "<video> What colour is it?"}, SINGLE[1]]
    with pytest.raises(ValueError, match="exactly one"):
        _example(tokenizer, model, two)
    # No video token: a placeholder that does not tokenize to the video token.
    with pytest.raises(ValueError, match="exactly one video token"):
        build_training_example(tokenizer, SINGLE, video_placeholder="<image>",
                               video_token_id=model.config.video_token_id, video_token_count=4)
    with pytest.raises(ValueError, match="end with a assistant turn"):
        _example(tokenizer, model, SINGLE[:1])
    with pytest.raises(ValueError, match="no user turn"):
        _example(tokenizer, model, [{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}])


def test_template_fallbacks(tokenizer, model):
    plain = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    # A template that only concatenates strings cannot take list content: the placeholder is
    # written into the text instead.
    plain.chat_template = (
        "{{ bos_token }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}"
        "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )
    ex = _example(plain, model, SINGLE, count=4)
    assert [plain.decode(run) for run in _answer_runs(ex)] == ["The square is red.\n</s>"]
    assert int((ex["input_ids"] == model.config.video_token_id).sum()) == 4
    # Templates that rewrite earlier turns are refused, not mislabelled: one that marks the
    # last message (so the answer's rendering does not extend the generation prompt) ...
    plain.chat_template = (
        "{% for m in messages %}{% if loop.last %}[LAST]{% endif %}{{ m['role'] }}: {{ m['content'] }}\n"
        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="answer span cannot be located"):
        _example(plain, model, SINGLE, count=4)
    # ... and one that marks the last user turn (like templates moving the system prompt there).
    plain.chat_template = (
        "{% set ns = namespace(last=0) %}{% for m in messages %}{% if m['role'] == 'user' %}"
        "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}"
        "{% if loop.index0 == ns.last %}[LAST]{% endif %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    assert _answer_runs(_example(plain, model, SINGLE, count=4))
    with pytest.raises(ChatTemplateError, match="not prefix-stable"):
        _example(plain, model, MULTI, count=4)


def test_llava_hf_style_template(tokenizer, model):
    """List content everywhere, BOS added (the tokenizer adds it) and EOS appended to each answer."""
    plain = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    plain.chat_template = LLAVA_HF_STYLE_TEMPLATE
    ex = _example(plain, model, MULTI, count=4)
    ids = ex["input_ids"]
    assert ids[0] == plain.bos_token_id and int((ids == plain.bos_token_id).sum()) == 1
    assert [plain.decode(run) for run in _answer_runs(ex)] == [
        " The square is red. </s>", " It moves left to right. </s>"]
    first_video = int((ids == model.config.video_token_id).nonzero()[0])
    assert plain.decode(ids[:first_video]) == "<s>You are a helpful assistant. USER: "
    prompt = build_generation_prompt(plain, MULTI[:4], video_placeholder="<video>",
                                     video_token_id=model.config.video_token_id, video_token_count=4)
    second = int((ex["labels"] != IGNORE_INDEX).nonzero().flatten()[-1]) - len(_answer_runs(ex)[1]) + 1
    assert torch.equal(prompt["input_ids"], ids[:second])


def test_pad_batch():
    ones = torch.ones(3, dtype=torch.long)
    a = {"input_ids": torch.tensor([5, 6, 7]), "labels": torch.tensor([-100, 6, 7]), "attention_mask": ones}
    b = {"input_ids": torch.tensor([8]), "labels": torch.tensor([8]), "attention_mask": ones[:1]}
    out = pad_batch([a, b], pad_token_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert out["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    left = pad_batch([{"input_ids": a["input_ids"]}, {"input_ids": b["input_ids"]}], 0, padding_side="left")
    assert left["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
