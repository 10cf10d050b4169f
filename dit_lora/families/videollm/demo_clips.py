"""A tiny video question-answering data set: moving-square clips with questions about them (no downloads).

``make_qa_dataset(root)`` writes moving-square clips (:func:`~dit_lora.data.synthetic.clips.write_moving_square_clip`)
and an annotation file asking about each: "What colour is the square?" (always) and "Which way does
the square move?" (for about half the clips). The answers ("red", "left to right") are short and can
be read off the pixels, so a small model can learn them. The annotation is VideoChat2's instruction
JSON (``videochat2.json``) or chat JSONL (``chat.jsonl``), and both describe the same conversations:
:func:`dit_lora.families.videollm.data.load_qa_samples` gives equal messages for either. Everything follows ``seed``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

from dit_lora.data.synthetic.clips import CLIP_COLORS, DIRECTIONS, write_moving_square_clip

__all__ = ["COLOR_QUESTION", "DIRECTION_QUESTION", "INSTRUCTION", "QA_FILENAMES", "make_qa_dataset"]

INSTRUCTION = "Watch the video and answer the question in a few words."
COLOR_QUESTION = "What colour is the square?"
DIRECTION_QUESTION = "Which way does the square move?"
QA_FILENAMES = {"videochat2": "videochat2.json", "chat": "chat.jsonl"}


def _clip_name(index: int, color: str, direction: str, num_frames: int, size: int) -> str:
    # The name carries a digest of what the clip shows, so a clip left by a call with another seed,
    # length or size is never mistaken for this one, yet the answer is not spelled out in the name.
    digest = hashlib.sha256(f"{color}|{direction}|{num_frames}|{size}".encode()).hexdigest()[:8]
    return f"clip_{index:05d}_{digest}.mp4"


def make_qa_dataset(
    root: str | os.PathLike,
    n: int = 12,
    num_frames: int = 8,
    size: int = 64,
    seed: int = 0,
    layout: str = "videochat2",
) -> Path:
    """Write ``n`` clips and their questions into folder ``root``; return the annotation file's path.

    Clip ``i`` gets a colour from :data:`~dit_lora.data.synthetic.clips.CLIP_COLORS` and a direction from
    :data:`~dit_lora.data.synthetic.clips.DIRECTIONS` drawn with ``random.Random(seed)``. Its conversation asks
    the colour (the first question carries :data:`INSTRUCTION`) and, for about half the clips, the
    direction as a second turn. ``layout="videochat2"`` writes ``videochat2.json`` (a list of
    ``{"video", "QA"}`` entries); ``layout="chat"`` writes ``chat.jsonl`` (``{"video", "messages"}``
    lines, the first user turn as transformers-style parts with a ``{"type": "video"}`` part).

    Idempotent: clips already in ``root`` are reused (their names encode what they show), so both
    layouts can share one folder. Files are identical for equal arguments.
    """
    if layout not in QA_FILENAMES:
        raise ValueError(f"layout must be one of {sorted(QA_FILENAMES)}, got {layout!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    entries = []
    for i in range(n):
        color = rng.choice(sorted(CLIP_COLORS))
        direction = rng.choice(DIRECTIONS)
        ask_direction = rng.random() < 0.5
        name = _clip_name(i, color, direction, num_frames, size)
        if not (root / name).is_file():
            write_moving_square_clip(root / name, color=color, direction=direction, num_frames=num_frames, size=size)
        qa = [(INSTRUCTION, COLOR_QUESTION, color)]
        if ask_direction:
            qa.append(("", DIRECTION_QUESTION, direction))
        entries.append((name, qa))

    path = root / QA_FILENAMES[layout]
    if layout == "videochat2":
        data = [{"video": name, "QA": [{"i": i, "q": q, "a": a} for i, q, a in qa]} for name, qa in entries]
        text = json.dumps(data, indent=1) + "\n"
    else:
        lines = []
        for name, qa in entries:
            messages = []
            for turn, (instruction, question, answer) in enumerate(qa):
                words = "\n".join(part for part in (instruction, question) if part)
                # The first user turn shows the parts form (the video part carries no path: "video" has it).
                content = [{"type": "video"}, {"type": "text", "text": words}] if turn == 0 else words
                messages += [{"role": "user", "content": content}, {"role": "assistant", "content": answer}]
            lines.append(json.dumps({"video": name, "messages": messages}) + "\n")
        text = "".join(lines)
    path.write_text(text, encoding="utf-8")
    return path
