"""families/cogvideox/info.py: what a CogVideoX checkpoint's small config files say (task, version, sizes), read
once, the size checks that name the nearest sizes the model and its pipeline accept, the RoPE limit, the size flags
named in messages (and loss.py's clip data path). The buckets and their checks on real layouts are in test_spec.py."""

from __future__ import annotations

import json
import re
import types
from types import SimpleNamespace

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.data.video_prepare import VideoMedia
from dit_lora.families.cogvideox.info import (
    CogVideoXVideo,
    ModelInfo,
    cached_model_info,
    check_latent_size,
    model_info,
    pad_latent_frames,
    rope_limit,
    size_flags,
)
from dit_lora.kit.video_sizes import ClipData
from dit_lora.registry import get_family
from config_stand_in import stand_in


def _suggested(message: str) -> list[int]:
    return [int(v) for v in re.search(r"Use (?:--resolution )?(\d+)(?: or (\d+))?\.", message).groups() if v]


@pytest.mark.parametrize("vae_blocks,patch", [(4, 2), (3, 1), (2, 1)])
def test_cogvideox_suggested_sizes_pass_the_pipelines_own_check(vae_blocks, patch):
    from diffusers import CogVideoXPipeline

    from dit_lora.families.cogvideox.info import check_size_multiple

    info = ModelInfo(vae_spatial=2 ** (vae_blocks - 1), patch_size=patch)
    pipe = types.SimpleNamespace(_callback_tensor_inputs=["latents"])
    for value in (4, 12, 60, 100):
        if value % info.size_multiple == 0:
            continue
        with pytest.raises(UserError) as err:
            check_size_multiple("--height", value, info.size_multiple, info)
        for size in _suggested(str(err.value)):
            CogVideoXPipeline.check_inputs(pipe, "a prompt", size, size, None, None)


def write_model(folder, *, in_channels=16, pipeline="CogVideoXPipeline", **transformer):
    """A model folder with only the small config files ``model_info`` reads."""
    (folder / "transformer").mkdir(parents=True)
    (folder / "vae").mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    config = {"in_channels": in_channels, "sample_frames": 9, "sample_height": 4, "sample_width": 6, **transformer}
    (folder / "transformer" / "config.json").write_text(json.dumps(config))
    (folder / "vae" / "config.json").write_text(json.dumps({"latent_channels": 16, "block_out_channels": [1, 2, 3]}))
    return TrainConfig(pretrained_model_name_or_path=str(folder))


def test_model_info_reads_the_task_and_version_from_the_configs(tmp_path):
    t2v = model_info(write_model(tmp_path / "t2v").model)
    assert t2v.task == "t2v" and "in_channels 16 = the VAE's 16 latent channels" in t2v.evidence
    assert t2v.vae_spatial == 4 and t2v.fps == 8 and t2v.describe() == "CogVideoX 1.0, 2B-style (3D sin-cos positions)"
    assert t2v.trained_size()[:3] == (9, 16, 24)  # sample size x the VAE's factor: no catalogue entry matches
    i2v = model_info(write_model(tmp_path / "i2v", in_channels=32, pipeline="CogVideoXImageToVideoPipeline",
                                 patch_size_t=2, use_rotary_positional_embeddings=True, ofs_embed_dim=512).model)
    assert i2v.task == "i2v" and i2v.fps == 16 and i2v.ofs
    assert i2v.describe().startswith("CogVideoX 1.5 (RoPE, patch_size_t 2") and "ofs embedding" in i2v.describe()
    unreadable = model_info(TrainConfig(pretrained_model_name_or_path=str(tmp_path / "missing")).model)
    assert unreadable.task is None and unreadable == ModelInfo(vae_spatial=8, task=None)


def test_latent_tokens_count_the_padded_latent_frames():
    v10 = ModelInfo(vae_spatial=8, patch_size=2)
    assert v10.size_multiple == 16 and v10.latent_tokens(49, 480, 720) == 13 * 30 * 45
    v15 = ModelInfo(vae_spatial=8, patch_size=2, patch_size_t=2)
    assert v15.latent_tokens(81, 768, 1360) == 11 * 48 * 85  # 21 latent frames padded to 22, in pairs


def test_pad_latent_frames_repeats_the_first_frame_in_front():
    latents = torch.arange(3.0).view(1, 3, 1, 1, 1)
    assert pad_latent_frames(latents, None) is latents and pad_latent_frames(latents[:, :2], 2).shape[1] == 2
    padded = pad_latent_frames(latents, 2)
    assert padded.flatten().tolist() == [0.0, 0.0, 1.0, 2.0]


def test_a_tiled_encode_that_miscounts_is_refused():
    vae = types.SimpleNamespace(config=types.SimpleNamespace(block_out_channels=[1, 2, 3, 4]),
                                tile_sample_min_height=32, tile_sample_min_width=32)
    check_latent_size(vae, (64, 96), (8, 12))
    with pytest.raises(UserError, match="instead of 8x12.*--enable_tiling false"):
        check_latent_size(vae, (64, 96), (9, 12))


def test_rope_limit_is_only_for_15s_sliced_table():
    assert rope_limit(ModelInfo(rope=True)) is None  # 1.0: RoPE crops a grid of any size
    assert rope_limit(ModelInfo(patch_size_t=2, rope=True, sample_height=300, sample_width=300)) == (2400, 2400)


def test_size_flags_name_what_the_user_set():
    cfg = stand_in(frame_buckets=None, height=64, width=None, max_num_frames=9)
    assert size_flags(cfg) == "--height/--max_num_frames"
    assert size_flags(stand_in(frame_buckets="9x64x64")) == "--frame_buckets"
    assert size_flags(stand_in(frame_buckets=None, height=None, width=None, max_num_frames=None)) == (
        "the defaults")


def test_model_info_is_read_once_and_the_data_path_decodes_clips():
    cfg = TrainConfig(family="cogvideox", pretrained_model_name_or_path="THUDM/CogVideoX-5b", train_data_dir="x")
    assert cached_model_info(cfg.model) is cached_model_info(cfg.model)
    assert CogVideoXVideo().model_fps(cfg.model) == 8
    spec = get_family("cogvideox")
    assert isinstance(ClipData().data_handler(cfg, spec), VideoMedia)
