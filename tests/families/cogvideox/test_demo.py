"""families/cogvideox/demo.py: the tiny offline CogVideoX pipelines (1.0 2B/5B, 1.5; T2V and I2V) load, generate
and carry each version's flags."""

from __future__ import annotations

import json

import pytest
import torch

from dit_lora.families.cogvideox.demo import TINY_COGVIDEOX_GEOMETRY, build_tiny_cogvideox_pipeline


CASES = [("t2v", "1.0-2b"), ("t2v", "1.0-5b"), ("i2v", "1.5")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cogvideox")
    return {case: build_tiny_cogvideox_pipeline(root / "-".join(case), task=case[0], version=case[1]) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_pipeline_loads_generates_and_has_version_flags(built, case):
    from diffusers import CogVideoXImageToVideoPipeline, CogVideoXPipeline
    from PIL import Image

    variant, version = case
    path = built[case]
    index = json.loads((path / "model_index.json").read_text())
    assert index["_class_name"] == ("CogVideoXImageToVideoPipeline" if variant == "i2v" else "CogVideoXPipeline")
    for sub in ("transformer", "vae", "text_encoder", "tokenizer", "scheduler"):
        assert (path / sub).is_dir()

    cls = CogVideoXImageToVideoPipeline if variant == "i2v" else CogVideoXPipeline
    pipe = cls.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    tc, sc = pipe.transformer.config, pipe.scheduler.config

    # Version flags (published configs; see dit_lora/families/cogvideox/demo.py).
    if version == "1.0-2b":
        assert not tc.use_rotary_positional_embeddings and not tc.use_learned_positional_embeddings
        assert tc.patch_size_t is None and sc.snr_shift_scale == 3.0
        # fixed sin-cos table: a buffer that is not saved with the weights
        assert "patch_embed.pos_embedding" not in pipe.transformer.state_dict()
        assert hasattr(pipe.transformer.patch_embed, "pos_embedding")
    elif version == "1.0-5b":
        assert tc.use_rotary_positional_embeddings and not tc.use_learned_positional_embeddings
        assert tc.patch_size_t is None and sc.snr_shift_scale == 1.0
        assert not hasattr(pipe.transformer.patch_embed, "pos_embedding")
    else:
        assert tc.use_rotary_positional_embeddings and tc.patch_size_t == 2 and tc.patch_bias is False
        assert sc.snr_shift_scale == 1.0 and pipe.vae.config.invert_scale_latents
    assert sc.prediction_type == "v_prediction" and sc.rescale_betas_zero_snr and sc.timestep_spacing == "trailing"
    latent_channels = pipe.vae.config.latent_channels
    assert tc.out_channels == latent_channels
    if variant == "i2v":
        assert tc.in_channels == 2 * latent_channels
        assert tc.ofs_embed_dim and pipe.transformer.ofs_embedding is not None  # 1.5 I2V
    else:
        assert tc.in_channels == latent_channels and tc.ofs_embed_dim is None

    # Tokenizer reloads through AutoTokenizer as T5's and knows the demo words.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, subfolder="tokenizer")
    ids = tok("a yellow triangle on a blue background").input_ids
    assert ids == pipe.tokenizer("a yellow triangle on a blue background").input_ids
    assert len(ids) == 8 and ids[-1] == tok.eos_token_id and tok.unk_token_id not in ids

    g = TINY_COGVIDEOX_GEOMETRY
    kwargs = dict(
        prompt="a red circle on a green background",
        height=g["height"],
        width=g["width"],
        num_frames=g["num_frames"],
        num_inference_steps=2,
        output_type="pt",
        generator=torch.Generator().manual_seed(0),
    )
    if variant == "i2v":
        kwargs["image"] = Image.new("RGB", (g["width"], g["height"]), (200, 30, 30))
    frames = pipe(**kwargs).frames
    assert frames.shape == (1, g["num_frames"], 3, g["height"], g["width"])
    assert torch.isfinite(frames).all()


def test_i2v_2b_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="no CogVideoX-2b image-to-video"):
        build_tiny_cogvideox_pipeline(tmp_path / "x", task="i2v", version="1.0-2b")
