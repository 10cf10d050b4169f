"""families/videollm/demo_clips.py: the demo's question-answer set (both layouts, answers the pixels show,
deterministic and idempotent)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("av")

from dit_lora.data.synthetic.clips import CLIP_COLORS  # noqa: E402
from dit_lora.families.videollm.data import load_qa_samples, read_frames  # noqa: E402
from dit_lora.families.videollm.demo_clips import (  # noqa: E402
    COLOR_QUESTION,
    DIRECTION_QUESTION,
    INSTRUCTION,
    make_qa_dataset,
)


def _square_color(frames: np.ndarray) -> str:
    """The CLIP_COLORS name nearest the mean of the pixels that are not background."""
    pixels = frames.reshape(-1, 3).astype(np.int64)
    square = pixels[np.abs(pixels - 20).sum(axis=1) > 90]
    mean = square.mean(axis=0)
    return min(CLIP_COLORS, key=lambda name: np.abs(mean - np.array(CLIP_COLORS[name])).sum())


def test_make_qa_dataset_both_layouts_load_and_answer_from_the_pixels(tmp_path):
    vc2 = make_qa_dataset(tmp_path, n=6, num_frames=8, seed=3)
    chat = make_qa_dataset(tmp_path, n=6, num_frames=8, seed=3, layout="chat")
    assert (vc2.name, chat.name) == ("videochat2.json", "chat.jsonl")
    assert len(list(tmp_path.glob("*.mp4"))) == 6  # the second layout reused the clips
    a, b = load_qa_samples(vc2), load_qa_samples(chat)
    assert len(a) == len(b) == 6
    assert [(s.video, s.messages) for s in a] == [(s.video, s.messages) for s in b]
    turns = {len(s.messages) for s in a}
    assert turns <= {2, 4}
    for sample in a:
        assert sample.messages[0] == {"role": "user", "content": f"{INSTRUCTION}\n{COLOR_QUESTION}"}
        answer = sample.messages[1]["content"]
        assert answer == _square_color(read_frames(sample.video, 8))
        if len(sample.messages) == 4:
            assert sample.messages[2]["content"] == DIRECTION_QUESTION
    # Deterministic and idempotent: the same call writes the same annotation, other seeds other clips.
    before = vc2.read_bytes()
    assert make_qa_dataset(tmp_path, n=6, num_frames=8, seed=3).read_bytes() == before
    other = make_qa_dataset(tmp_path / "other", n=6, num_frames=8, seed=4)
    assert [s.messages for s in load_qa_samples(other)] != [s.messages for s in a]
    with pytest.raises(ValueError, match="layout"):
        make_qa_dataset(tmp_path, layout="csv")


def test_n_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="n must be >= 1"):
        make_qa_dataset(tmp_path, n=0)
