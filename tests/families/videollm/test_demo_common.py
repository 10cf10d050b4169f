"""families/videollm/demo_common.py: the tiny builders' seeded model with its scaled head, the folder's files, and
one whole build that is deterministic, idempotent and leaves the caller's random state alone."""

from __future__ import annotations

import json

import torch

from dit_lora.families.videollm.demo_common import (
    LM_HEAD_SCALE,
    TINY_MARKER,
    save_tiny_folder,
    seeded_model,
)


class _Tiny(torch.nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.lm_head = torch.nn.Linear(4, 6, bias=False)


def test_a_seeded_model_is_the_same_for_a_seed_its_head_scaled_and_the_callers_rng_untouched():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = seeded_model(_Tiny, None, 7), seeded_model(_Tiny, None, 7)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    plain = seeded_model(_Tiny, None, 7, head_scale=None)
    assert torch.allclose(a.lm_head.weight, plain.lm_head.weight * LM_HEAD_SCALE)
    assert not torch.equal(seeded_model(_Tiny, None, 8).body.weight, a.body.weight)


def test_save_tiny_folder_writes_bf16_weights_the_tokenizer_and_each_preprocessor(tmp_path):
    saved = {}

    class Model(_Tiny):
        def save_pretrained(self, folder, safe_serialization):
            saved["dtype"], saved["safe"] = self.body.weight.dtype, safe_serialization

    class Tokenizer:
        def save_pretrained(self, folder):
            (folder / "tokenizer.json").write_text("{}")

    save_tiny_folder(tmp_path, Model(None), Tokenizer(), {"video_preprocessor_config.json": {"b": 1, "a": 2}},
                     sort_keys=True)
    assert saved == {"dtype": torch.bfloat16, "safe": True} and (tmp_path / "tokenizer.json").exists()
    text = (tmp_path / "video_preprocessor_config.json").read_text()
    assert json.loads(text) == {"a": 2, "b": 1} and text.index('"a"') < text.index('"b"')


def test_the_qwen3_vl_tiny_build_is_deterministic_and_not_rebuilt(tmp_path):
    """build_tiny_checkpoint through the Qwen3-VL builder, its one caller of the simplest shape."""
    from dit_lora.families.videollm.demo_qwen3_vl import build_tiny_qwen3_vl

    first = build_tiny_qwen3_vl(tmp_path / "a")
    marker = json.loads((first / TINY_MARKER).read_text())
    assert marker["kind"] and marker["seed"] == 0 and marker["dtype"] == "bfloat16"
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_qwen3_vl(tmp_path / "a") == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    second = build_tiny_qwen3_vl(tmp_path / "b")
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
    assert (first / "video_preprocessor_config.json").exists() and (first / "generation_config.json").exists()
