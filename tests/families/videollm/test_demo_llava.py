"""families/videollm/demo_llava.py: the tiny offline LLaVA-NeXT-Video (laid out like the llava-hf repos, cached,
deterministic per seed)."""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.families.videollm.llava_next_video import LlavaNextVideoSpec

SPEC = LlavaNextVideoSpec()


def test_tiny_folder_looks_like_the_real_repo(tiny_path, model, tokenizer):
    from safetensors import safe_open

    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "preprocessor_config.json", "video_preprocessor_config.json", "dit_lora_tiny.json"):
        assert (tiny_path / name).is_file(), name
    with safe_open(tiny_path / "model.safetensors", "pt") as handle:
        assert {handle.get_tensor(k).dtype for k in handle.keys()} == {torch.bfloat16}
    assert type(model).__name__ == SPEC.model_class
    assert [n for n, _ in model.named_children()] == ["model", "lm_head"]
    assert {n for n, _ in model.model.named_children()} == {
        "vision_tower", "multi_modal_projector", "language_model", "vision_resampler"}
    for dotted in (SPEC.vision_tower, SPEC.projector, SPEC.language_model):
        assert isinstance(SPEC.module(model, dotted), torch.nn.Module)
    with pytest.raises(AttributeError, match="no module"):
        SPEC.module(model, "model.nope")
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    assert model.config.text_config.vocab_size == len(tokenizer)
    assert tokenizer.convert_tokens_to_ids(SPEC.video_token) == model.config.video_token_id
    assert tokenizer.chat_template


def test_tiny_build_is_cached_and_deterministic(tiny_path, tmp_path):
    from dit_lora.families.videollm import demo_llava as tiny_videollm

    mtime = (tiny_path / "model.safetensors").stat().st_mtime_ns
    assert tiny_videollm.build_tiny_llava_next_video(tiny_path, seed=0) == tiny_path
    assert (tiny_path / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not rewritten

    other = tiny_videollm.build_tiny_llava_next_video(tmp_path / "again", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (other / name).read_bytes() == (tiny_path / name).read_bytes(), name
    # A marker from another version is rebuilt in place.
    marker = json.loads((other / "dit_lora_tiny.json").read_text())
    (other / "dit_lora_tiny.json").write_text(json.dumps(dict(marker, version=-1)))
    tiny_videollm.build_tiny_llava_next_video(other, seed=0)
    assert json.loads((other / "dit_lora_tiny.json").read_text()) == marker
    reseeded = tiny_videollm.build_tiny_llava_next_video(tmp_path / "seed1", seed=1)
    assert (reseeded / "model.safetensors").read_bytes() != (tiny_path / "model.safetensors").read_bytes()
