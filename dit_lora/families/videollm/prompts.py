"""Chat-template prompts for video-LLM fine-tuning, with labels on the answers only.

A training sample is a conversation ``[{"role": "system"|"user"|"assistant", "content": str}]``
ending with an assistant turn; the video belongs to the first user turn.  It is rendered with
the tokenizer's own chat template (so training sees exactly the format the checkpoint was
instruction-tuned on) and the loss covers only what the model should produce: each assistant
answer plus the end-of-turn token(s) the template puts after it (``</s>``, ``<|im_end|>`` ...),
so the model also learns to stop (templates that write no end-of-turn token after an answer,
like the llava-hf LLaVA-NeXT-Video one, get EOS appended there).  System prompt, user turns,
template scaffolding and every video token are masked with -100.

How the answer spans are found: for each assistant turn ``i`` the template renders
``messages[:i]`` with the generation prompt (``prefix``) and ``messages[:i + 1]`` (``full``);
the answer is ``full[len(prefix):]``.  That requires the template to be "prefix-stable"
(rendering more turns only appends text); templates that rewrite earlier turns (e.g. that move
the system prompt into the last user turn) are rejected with :class:`ChatTemplateError`
rather than silently mislabelled.

The video is put in the first user turn the way transformers' processors do it,
``content=[{"type": "video"}, {"type": "text", "text": ...}]``, which the real LLaVA-NeXT-Video
and Qwen2.5-VL templates render as ``<video>`` / ``<|vision_start|><|video_pad|><|vision_end|>``.
A template that cannot render list content gets ``video_placeholder + "\\n" + text`` instead.
After tokenization the one ``video_token_id`` is expanded to ``video_token_count`` copies, the
number of video features the vision tower will produce (see the spec's ``video_token_count``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "IGNORE_INDEX",
    "ChatTemplateError",
    "build_generation_prompt",
    "build_training_example",
    "pad_batch",
]

IGNORE_INDEX = -100  # the label value torch's cross-entropy (and transformers' losses) skip

_ROLES = ("system", "user", "assistant")


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be used for answer-only labels."""


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------
def _template_name(tokenizer) -> str:
    return f"the chat template of {getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__}"


def _check_messages(messages: Sequence[dict[str, Any]], last_role: str) -> int:
    """Validate the conversation; return the index of the first user turn (the video's turn)."""
    if not messages:
        raise ValueError("messages is empty; a conversation needs at least a user turn")
    for i, message in enumerate(messages):
        if message.get("role") not in _ROLES:
            raise ValueError(f"message {i} has role {message.get('role')!r}; expected one of {_ROLES}")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"message {i} content must be a string, got {type(message.get('content')).__name__}")
    if messages[-1]["role"] != last_role:
        raise ValueError(f"the conversation must end with a {last_role} turn, not {messages[-1]['role']!r}")
    roles = [m["role"] for m in messages]
    if "user" not in roles:
        raise ValueError("the conversation has no user turn to attach the video to")
    first_user = roles.index("user")
    if "assistant" in roles[:first_user]:
        raise ValueError("an assistant turn comes before the first user turn (the one with the video)")
    return first_user


def _styled(messages: Sequence[dict[str, Any]], first_user: int, style: str, placeholder: str) -> list[dict]:
    """Messages with the video attached to the first user turn in one of three styles.

    ``video_part``: that turn's content is ``[{"type": "video"}, {"type": "text", ...}]``, the
    others stay strings (templates that accept both, like Qwen2.5-VL's).  ``all_parts``: every
    turn uses list content (templates that iterate ``message['content']`` unconditionally, like
    LLaVA-NeXT-Video's).  ``prefix``: plain strings, the placeholder written into the text.
    """
    out = []
    for i, message in enumerate(messages):
        text = message["content"]
        if style == "prefix":
            content: Any = f"{placeholder}\n{text}" if i == first_user else text
        elif i == first_user:
            content = [{"type": "video"}, {"type": "text", "text": text}]
        elif style == "all_parts":
            content = [{"type": "text", "text": text}]
        else:
            content = text
        out.append({"role": message["role"], "content": content})
    return out


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    if not messages:
        return ""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def _pick_style(tokenizer, messages, first_user: int, placeholder: str, add_generation_prompt: bool) -> list[dict]:
    """The first style whose rendering has exactly one placeholder and every message's text."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(f"{_template_name(tokenizer)} is missing (tokenizer.chat_template is not set)")
    problems = []
    counts = []
    for style in ("video_part", "all_parts", "prefix"):
        styled = _styled(messages, first_user, style, placeholder)
        try:
            text = _render(tokenizer, styled, add_generation_prompt)
        except Exception as err:  # jinja raises TemplateError, TypeError, ... for content it cannot take
            problems.append(f"{style}: {type(err).__name__}: {err}")
            continue
        count = text.count(placeholder)
        counts.append(count)
        # Templates may trim content, so look for the stripped text.
        missing = [i for i, m in enumerate(messages) if m["content"].strip() not in text]
        if count == 1 and not missing:
            return styled
        problems.append(f"{style}: {count} placeholder(s), text of messages {missing} missing")
    if counts and min(counts) > 1:
        raise ValueError(
            f"found {min(counts)} video placeholders {placeholder!r} in the rendered prompt; exactly one is "
            f"allowed (the video of the first user turn): remove {placeholder!r} from the message texts"
        )
    raise ChatTemplateError(
        f"{_template_name(tokenizer)} cannot render this conversation with exactly one video placeholder "
        f"{placeholder!r} ({'; '.join(problems)})"
    )


def _segments(tokenizer, styled: list[dict], add_generation_prompt: bool) -> list[tuple[str, bool]]:
    """Split the rendered conversation into (text, is_answer) segments, in order."""
    name = _template_name(tokenizer)
    segments: list[tuple[str, bool]] = []
    done = ""  # rendering of the conversation up to and including the last assistant turn so far
    for i, message in enumerate(styled):
        if message["role"] != "assistant":
            continue
        prefix = _render(tokenizer, styled[:i], add_generation_prompt=True)
        full = _render(tokenizer, styled[: i + 1], add_generation_prompt=False)
        if not prefix.startswith(done):
            raise ChatTemplateError(
                f"{name} is not prefix-stable: rendering the conversation up to turn {i} changes the text of "
                f"earlier turns, so answer spans cannot be located; use a template that only appends turns"
            )
        if not full.startswith(prefix):
            raise ChatTemplateError(
                f"{name} renders assistant turn {i} differently from its generation prompt (the rendering with "
                f"the answer does not start with the rendering with add_generation_prompt=True), so the answer "
                f"span cannot be located; fix the template's generation prompt"
            )
        segments.append((prefix[len(done) :], False))
        segments.append((full[len(prefix) :], True))
        done = full
    final = _render(tokenizer, styled, add_generation_prompt=add_generation_prompt)
    if not final.startswith(done):
        raise ChatTemplateError(f"{name} is not prefix-stable: the full rendering does not extend the last answer")
    if final[len(done) :]:
        segments.append((final[len(done) :], False))
    return segments


# --------------------------------------------------------------------------------------
# Tokenization
# --------------------------------------------------------------------------------------
def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _adds_bos(tokenizer) -> bool:
    """Whether the tokenizer prepends BOS when encoding with special tokens (Llama, Mistral do)."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    return list(tokenizer("a", add_special_tokens=True)["input_ids"])[:1] == [bos]


def _tokenize_segments(tokenizer, segments: list[tuple[str, bool]]) -> tuple[list[int], list[bool]]:
    """Token ids of the segments and, per token, whether it is an answer token.

    Each segment's ids are what tokenizing the text so far adds to the ids so far, i.e. the
    joint tokenization when segment boundaries are token boundaries.  Tokenizing a mid-sequence
    segment on its own would be wrong for tokenizers that mark the start of a string (Metaspace
    prepends "▁"); where a token would straddle a boundary, the segment is tokenized alone
    instead, which keeps the prompt tokens identical to the generation prompt's.

    An answer whose tokens contain no special token (a template without an end-of-turn marker,
    like LLaVA-NeXT-Video's "ASSISTANT: answer ") gets EOS appended as a label: without it the
    model would never learn to stop.
    """
    special = set(tokenizer.all_special_ids) | {
        i for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items() if getattr(tok, "special", False)
    }
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    is_answer: list[bool] = []
    text = ""
    from_text: list[int] = []  # ids of the rendered text so far (without appended EOS tokens)
    for segment, answer in segments:
        text += segment
        joint = _encode(tokenizer, text)
        new = joint[len(from_text) :] if joint[: len(from_text)] == from_text else _encode(tokenizer, segment)
        from_text += new
        if answer and eos is not None and not special.intersection(new):
            new = new + [eos]
        ids += new
        is_answer += [answer] * len(new)
    if _adds_bos(tokenizer) and ids[:1] != [tokenizer.bos_token_id]:
        # The template has no BOS (LLaVA's does not; the processor adds it when tokenizing).
        ids.insert(0, tokenizer.bos_token_id)
        is_answer.insert(0, False)
    return ids, is_answer


def _expand_video(
    ids: list[int],
    is_answer: list[bool],
    video_token_id: int,
    video_token_count: int,
    placeholder: str,
    video_ids: Sequence[int] | None = None,
) -> tuple[list[int], list[bool]]:
    """Replace the single video token with ``video_ids``, else ``video_token_count`` copies of it (never labels)."""
    if int(video_token_count) < 1:
        raise ValueError(f"video_token_count must be >= 1, got {video_token_count}")
    positions = [i for i, t in enumerate(ids) if t == video_token_id]
    if len(positions) != 1:
        raise ValueError(
            f"expected exactly one video token (id {video_token_id}) after tokenizing the prompt, found "
            f"{len(positions)}; the placeholder {placeholder!r} must tokenize to the video token once"
        )
    at = positions[0]
    video = list(video_ids) if video_ids is not None else [video_token_id] * int(video_token_count)
    return ids[:at] + video + ids[at + 1 :], is_answer[:at] + [False] * len(video) + is_answer[at + 1 :]


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------
def build_training_example(
    tokenizer,
    messages: Sequence[dict[str, Any]],
    *,
    video_placeholder: str,
    video_token_id: int,
    video_token_count: int,
    max_length: int | None = None,
    video_ids: Sequence[int] | None = None,
) -> dict[str, torch.Tensor]:
    """Tokenize a conversation ending with an assistant turn into an answer-only-labelled example.

    Returns 1-D LongTensors ``input_ids``, ``labels`` (-100 except the answer tokens, each
    followed by its end-of-turn token(s), or EOS if the template writes none) and
    ``attention_mask`` (ones), with the video expanded to ``video_token_count`` tokens (or to ``video_ids``, the
    spec's :meth:`~dit_lora.families.videollm.architecture.VideoLLMSpec.video_prompt_ids`, when given).  Raises ``ValueError`` when the video placeholder
    is missing or repeated, and when the example is longer than ``max_length`` (the message
    names --max_sequence_length; callers quarantine such samples).
    """
    first_user = _check_messages(messages, "assistant")
    styled = _pick_style(tokenizer, messages, first_user, video_placeholder, add_generation_prompt=False)
    ids, is_answer = _tokenize_segments(tokenizer, _segments(tokenizer, styled, add_generation_prompt=False))
    ids, is_answer = _expand_video(ids, is_answer, video_token_id, video_token_count, video_placeholder, video_ids)
    if max_length is not None and len(ids) > max_length:
        raise ValueError(
            f"the example is {len(ids)} tokens long ({video_token_count} of them video tokens), more than "
            f"--max_sequence_length {max_length}; raise --max_sequence_length or use fewer/smaller frames"
        )
    input_ids = torch.tensor(ids, dtype=torch.long)
    labels = torch.where(torch.tensor(is_answer, dtype=torch.bool), input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return {"input_ids": input_ids, "labels": labels, "attention_mask": torch.ones_like(input_ids)}


def build_generation_prompt(
    tokenizer,
    messages: Sequence[dict[str, Any]],
    *,
    video_placeholder: str,
    video_token_id: int,
    video_token_count: int,
    video_ids: Sequence[int] | None = None,
) -> dict[str, torch.Tensor]:
    """Tokenize a conversation ending with a user turn, with the generation prompt appended.

    Returns 1-D ``input_ids`` and ``attention_mask`` with the video expanded.  Earlier
    assistant turns are tokenized exactly as :func:`build_training_example` tokenizes them, so
    the prompt equals the training example's tokens up to the answer being generated.
    """
    first_user = _check_messages(messages, "user")
    styled = _pick_style(tokenizer, messages, first_user, video_placeholder, add_generation_prompt=True)
    ids, is_answer = _tokenize_segments(tokenizer, _segments(tokenizer, styled, add_generation_prompt=True))
    ids, _ = _expand_video(ids, is_answer, video_token_id, video_token_count, video_placeholder, video_ids)
    input_ids = torch.tensor(ids, dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


_PAD_VALUES = {"labels": IGNORE_INDEX, "attention_mask": 0}


def pad_batch(
    examples: list[dict[str, torch.Tensor]], pad_token_id: int, padding_side: str = "right"
) -> dict[str, torch.Tensor]:
    """Stack 1-D examples into (B, L) tensors, padding to the longest.

    ``input_ids`` are padded with ``pad_token_id``, ``labels`` with -100 and ``attention_mask``
    with 0.  Right padding (the default) is what training wants; ``padding_side="left"`` is for
    batched generation, where every prompt must end at the last position.
    """
    if not examples:
        raise ValueError("pad_batch needs at least one example")
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    keys = list(examples[0])
    unknown = [k for k in keys if k not in ("input_ids", "labels", "attention_mask")]
    if unknown:
        raise ValueError(f"pad_batch pads input_ids, labels and attention_mask only; got extra keys {unknown}")
    length = max(int(ex["input_ids"].shape[0]) for ex in examples)
    batch: dict[str, torch.Tensor] = {}
    for key in keys:
        value = pad_token_id if key == "input_ids" else _PAD_VALUES[key]
        out = torch.full((len(examples), length), value, dtype=torch.long)
        for row, ex in enumerate(examples):
            seq = ex[key]
            if seq.dim() != 1 or seq.shape[0] != ex["input_ids"].shape[0]:
                raise ValueError(f"example {row}: {key} must be 1-D and as long as input_ids")
            if padding_side == "right":
                out[row, : seq.shape[0]] = seq
            else:
                out[row, length - seq.shape[0] :] = seq
        batch[key] = out
    return batch
