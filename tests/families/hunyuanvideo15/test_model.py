"""families/hunyuanvideo15/model.py: the sync-free forward gives diffusers' forward's output (text- and image-to-video,
padded captions of different lengths, two samples) without reading the device, and the step-distilled checkpoint is
refused in one paragraph."""

from __future__ import annotations

import copy
import types

import pytest
import torch

from dit_lora.families.hunyuanvideo15.model import sync_free


def _inputs(model, image: bool) -> dict:
    """Two samples: captions of 5 and 9 valid tokens of 12, ByT5 glyphs on the first only, image tokens or zeros."""
    g = torch.Generator().manual_seed(0)
    cfg = model.config
    mask = torch.zeros(2, 12, dtype=torch.int64)
    mask[0, :5], mask[1, :9] = 1, 1
    glyph_mask = torch.zeros(2, 6, dtype=torch.int64)
    glyph_mask[0, :3] = 1
    return {
        "hidden_states": torch.randn(2, cfg.in_channels, 3, 4, 4, generator=g),
        "timestep": torch.tensor([300.0, 700.0]),
        "encoder_hidden_states": torch.randn(2, 12, cfg.text_embed_dim, generator=g),
        "encoder_attention_mask": mask,
        "encoder_hidden_states_2": torch.randn(2, 6, cfg.text_embed_2_dim, generator=g),
        "encoder_attention_mask_2": glyph_mask,
        "image_embeds": torch.randn(2, 4, cfg.image_embed_dim, generator=g) if image else torch.zeros(2, 4, cfg.image_embed_dim),
    }  # fmt: skip


@pytest.mark.parametrize("image", [False, True], ids=["t2v", "i2v"])
def test_the_sync_free_forward_gives_diffusers_output(hv15_components, image):
    stock = hv15_components["transformer"]
    ours = copy.deepcopy(stock)
    sync_free(ours)
    assert isinstance(ours.forward, types.MethodType) and ours.forward.__func__.__name__ == "sync_free_forward"
    inputs = _inputs(stock, image)
    with torch.no_grad():
        expected = stock(**inputs, return_dict=False)[0]
        got = ours(**inputs, return_dict=False)[0]
    assert torch.isfinite(got).all() and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # and the image tokens matter only when some are not zero (diffusers' text-to-video switch)
    other = dict(inputs, image_embeds=inputs["image_embeds"] * 2)
    with torch.no_grad():
        changed = not torch.equal(ours(**other, return_dict=False)[0], got)
    assert changed == image


def test_the_sync_free_forward_reads_nothing_back_from_the_device(hv15_components):
    """The ops diffusers' forward reads back (``aten::item``/``nonzero`` under a boolean index or a Python ``if``) do
    not occur: counted with torch's dispatch mode."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Reads(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in {"_local_scalar_dense", "nonzero", "item", "masked_select"}:
                self.names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    stock = hv15_components["transformer"]
    ours = copy.deepcopy(stock)
    sync_free(ours)
    inputs = _inputs(stock, True)
    with torch.no_grad(), Reads() as theirs:
        stock(**inputs, return_dict=False)
    with torch.no_grad(), Reads() as mine:
        ours(**inputs, return_dict=False)
    assert theirs.names and not mine.names, (theirs.names, mine.names)


def test_lora_goes_on_every_dual_stream_block_but_the_last_blocks_unread_caption_output(hv15_components):
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    model = hv15_components["transformer"]
    cfg = TrainConfig.for_family("hunyuanvideo15", pretrained_model_name_or_path="unused")
    targets = get_spec("hunyuanvideo15").model.lora_targets(model, cfg.lora)
    last = len(model.transformer_blocks) - 1
    assert "transformer_blocks.0.attn.to_add_out" in targets and f"transformer_blocks.{last}.attn.to_add_out" not in targets
    assert f"transformer_blocks.{last}.attn.add_q_proj" in targets and not any("refiner" in t for t in targets)
    assert len(targets) == 8 * (last + 1) - 1
    assert get_spec("hunyuanvideo15").model.lora_targets(model, TrainConfig.for_family(
        "hunyuanvideo15", pretrained_model_name_or_path="unused", lora_layers=["to_q"]).lora) == ["to_q"]  # fmt: skip
