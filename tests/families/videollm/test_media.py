"""The video-QA media handler: training data that brings its own collate (padding), declared, not probed."""

from __future__ import annotations

import types

import pytest
import torch

pytest.importorskip("av")

from dit_lora.config import TrainConfig  # noqa: E402
from dit_lora.data import batches as batch_lib  # noqa: E402
from dit_lora.data.prepare import prepare_data  # noqa: E402
from dit_lora.families.videollm.demo_clips import make_qa_dataset  # noqa: E402
from dit_lora.families.videollm.media import VideoQAMedia  # noqa: E402


class _StubQAFamily:
    """Just what prepare_data and VideoQAMedia ask of a video-LLM family spec: its data component (itself) and no
    setup; as the processing, one token per character of the conversation."""

    name = "stub_qa"
    pad_token_id = 0
    setup = None
    video_qa = None  # no architecture: only LLaMA-Factory's placeholders are refused in the texts

    def __init__(self) -> None:
        self.data = self
        self.spec = types.SimpleNamespace(  # the architecture, as the processing holds it
            collate_pixels=lambda items: {"pixel_values": torch.stack([it["pixel_values"] for it in items])})

    def data_handler(self, cfg, spec):
        return VideoQAMedia(cfg, spec, processing=self)  # the stub is its own tokenizer and preprocessing

    def frame_inputs(self, frames, fps):
        return {"pixel_values": torch.as_tensor(frames).float().mean(dim=(1, 2, 3))}, 2

    def tokenize(self, messages, video_tokens, max_length, times=None):
        ids = torch.tensor([ord(c) % 97 + 1 for m in messages for c in m["content"]] + [5] * video_tokens)
        return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def test_video_qa_data_declares_its_padding_collate_and_the_loader_uses_it(tmp_path):
    annotation = make_qa_dataset(tmp_path / "qa", n=4, num_frames=8, seed=3)
    cfg = TrainConfig.for_family(family="qwen2_5_vl", train_data_dir=str(annotation), num_frames=4,
                      output_dir=str(tmp_path / "out"), cache_latents=True)
    accelerator = types.SimpleNamespace(is_main_process=True, process_index=0, num_processes=1,
                                        wait_for_everyone=lambda: None)
    data = prepare_data(cfg, _StubQAFamily(), None, accelerator)
    assert not data.cached and data.collate is not batch_lib.collate  # video LLMs never cache; they pad

    lengths = [int(data.dataset[(i, False)]["input_ids"].shape[0]) for i in range(len(data))]
    assert len(set(lengths)) > 1  # conversations of different lengths: stacking alone would fail
    order = batch_lib.EpochBatches(len(data), len(data), seed=0, rank=0, world_size=1, random_flip=False)
    (batch,) = list(batch_lib.epoch_loader(data.dataset, data.collate, order, 0, 0, 0))
    assert batch["input_ids"].shape == (len(data), max(lengths))
    assert batch["pixel_values"].shape[0] == len(data) and sorted(batch["sample_index"]) == list(range(len(data)))
    short = lengths.index(min(lengths))
    row = batch["sample_index"].index(short)
    assert (batch["labels"][row, min(lengths):] == -100).all()
    assert (batch["attention_mask"][row, min(lengths):] == 0).all()


@pytest.mark.parametrize("main", [True, False])
def test_cut_conversations_are_judged_by_the_main_process_only(tmp_path, monkeypatch, capsys, main):
    """Judging the cut conversations reads every multi-round clip again: only the rank that logs it does it."""
    annotation = make_qa_dataset(tmp_path / "qa", n=4, num_frames=8, seed=3)
    cfg = TrainConfig.for_family(family="qwen2_5_vl", train_data_dir=str(annotation), num_frames=4,
                      output_dir=str(tmp_path / "out"))
    calls = []
    monkeypatch.setattr(VideoQAMedia, "cut_rounds_line",
                        lambda self, samples: calls.append(len(samples)) or "long conversations: stub")
    accelerator = types.SimpleNamespace(is_main_process=main, process_index=0 if main else 1, num_processes=1,
                                        wait_for_everyone=lambda: None)
    data = prepare_data(cfg, _StubQAFamily(), None, accelerator)
    assert calls == ([len(data.samples)] if main else [])
    assert ("long conversations: stub" in capsys.readouterr().out) == main
