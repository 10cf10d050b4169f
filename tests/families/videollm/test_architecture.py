"""families/videollm/architecture.py: the frame helpers every video-LLM spec shares (checks, resizing as PIL does,
cropping, normalising, the preprocessor files). The spec classes themselves: test_llava_next_video.py and
test_qwen2_5_vl.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from dit_lora.core.errors import UserError
from dit_lora.families.videollm.architecture import (
    _size_pair,
    center_crop,
    check_frames,
    frames_to_tensor,
    normalize,
    read_preprocessor_json,
    resize_frames,
    resize_shortest_edge,
    shortest_edge_size,
)


def test_check_frames_and_to_tensor():
    frames = np.zeros((2, 4, 6, 3), dtype=np.uint8)
    frames[1, 0, 0] = (1, 2, 3)
    tensor = frames_to_tensor(frames)
    assert tensor.shape == (2, 3, 4, 6) and tensor.dtype == torch.float32 and tensor[1, :, 0, 0].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match=r"shape \(F, H, W, 3\)"):
        check_frames(np.zeros((4, 6, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        check_frames(np.zeros((1, 4, 6, 3), dtype=np.float32))


@pytest.mark.parametrize("height,width,edge", [(40, 48, 32), (240, 320, 32), (20, 30, 32)])
def test_resize_matches_pil(height, width, edge):
    image = np.random.RandomState(height).randint(0, 256, (height, width, 3), dtype=np.uint8)
    out_h, out_w = shortest_edge_size(height, width, edge)
    assert min(out_h, out_w) == edge and (out_h, out_w) == ((edge, int(edge * width / height)))
    pil = np.asarray(Image.fromarray(image).resize((out_w, out_h), Image.BICUBIC)).astype(np.float32)
    ours = resize_shortest_edge(frames_to_tensor(image[None]), edge)[0].permute(1, 2, 0).numpy()
    assert np.abs(ours - pil).max() <= 1.0


def test_resize_is_a_no_op_at_the_size_and_nearest_keeps_values():
    frames = torch.arange(16.0).view(1, 1, 4, 4).expand(1, 3, 4, 4).contiguous()
    assert resize_frames(frames, (4, 4)) is frames
    assert set(resize_frames(frames, (2, 2), "nearest").unique().tolist()) <= set(range(16))


def test_center_crop_takes_the_middle_and_pads_small_frames():
    frames = torch.arange(36.0).view(1, 1, 6, 6)
    assert center_crop(frames, (2, 2)).flatten().tolist() == [14.0, 15.0, 20.0, 21.0]
    padded = center_crop(torch.ones(1, 1, 2, 2), (4, 4))
    assert padded.shape == (1, 1, 4, 4) and padded.sum() == 4 and padded[0, 0, 1:3, 1:3].sum() == 4


def test_normalize_rescales_then_standardises_per_channel():
    frames = torch.full((1, 3, 1, 1), 255.0)
    out = normalize(frames, mean=(0.5, 0.0, 1.0), std=(0.5, 1.0, 2.0))
    assert out.flatten().tolist() == [1.0, 1.0, 0.0]


def test_preprocessor_files_merge_earlier_names_first(tmp_path):
    assert read_preprocessor_json(tmp_path) == {}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"size": 336, "crop_size": 336}))
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps({"size": 224}))
    assert read_preprocessor_json(tmp_path) == {"size": 224, "crop_size": 336}
    (tmp_path / "video_preprocessor_config.json").write_text("{broken")
    with pytest.raises(UserError, match="video_preprocessor_config.json is not valid JSON"):
        read_preprocessor_json(tmp_path)


def test_size_entries():
    assert _size_pair(224, "size") == (224, 224) and _size_pair([2, 3], "size") == (2, 3)
    assert _size_pair({"height": 4, "width": 5}, "crop_size") == (4, 5)
    with pytest.raises(UserError, match="cannot read crop_size"):
        _size_pair({"shortest_edge": 4}, "crop_size")


def test_the_shared_preprocessing_overlay_and_the_device_causal_mask():
    import torch

    from dit_lora.families.videollm.architecture import device_causal_mask, overlay_preprocessing

    prep = {"image_mean": (0.5,) * 3, "do_resize": True, "resample": "bicubic"}
    overlay_preprocessing(prep, {"image_mean": [0, 1, 2], "do_resize": 0, "rescale_factor": "0.5", "other": 1})
    assert prep == {"image_mean": (0.0, 1.0, 2.0), "do_resize": False, "resample": "bicubic", "rescale_factor": 0.5}
    inputs = {"attention_mask": torch.tensor([[1, 1, 1, 0]])}
    full = device_causal_mask(inputs, None)["attention_mask"]
    assert full.shape == (1, 1, 4, 4) and full[0, 0].tolist() == [
        [True, False, False, False], [True, True, False, False], [True, True, True, False], [True, True, True, False]]
    windowed = device_causal_mask(inputs, 2)["attention_mask"][0, 0]
    assert windowed[2].tolist() == [False, True, True, False]
    four_d = {"attention_mask": torch.ones(1, 1, 4, 4)}
    assert device_causal_mask(four_d, 2) is four_d
