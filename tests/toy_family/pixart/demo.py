"""A tiny random PixArt-alpha pipeline as the kit's :class:`~dit_lora.kit.tiny.TinyPipeline`: only the
widths and depths shrink (``ada_norm_single``, a learned sigma, a T5 of the shapes captions' words, PixArt's DPM-Solver
over DDPM's linear betas)."""

from __future__ import annotations

from pathlib import Path

from dit_lora.kit import tiny

TINY_PIXART_VERSION = 1  # bump when the configs or the init change: a build of another version is rebuilt
RESOLUTION = 32  # sample_size 4 x the VAE's 8x
TRANSFORMER = {"num_attention_heads": 2, "attention_head_dim": 16, "in_channels": 4, "out_channels": 8,
               "num_layers": 1, "cross_attention_dim": 32, "caption_channels": 32, "sample_size": 4, "patch_size": 2,
               "norm_type": "ada_norm_single", "norm_elementwise_affine": False, "norm_eps": 1e-6,
               "use_additional_conditions": False}  # the 1024 px PixArt's size embedding is off below 128
VAE = {"block_out_channels": [8, 8, 16, 16], "down_block_types": ["DownEncoderBlock2D"] * 4,
       "up_block_types": ["UpDecoderBlock2D"] * 4, "latent_channels": 4, "norm_num_groups": 4, "layers_per_block": 1,
       "sample_size": 32}
T5 = {"d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 1, "num_heads": 2, "relative_attention_num_buckets": 8,
      "relative_attention_max_distance": 16, "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new",
      "is_gated_act": True, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}
#: PixArt-alpha's scheduler (what PixArt-alpha/PixArt-XL-2-* ship)
SCHEDULER = {"num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
             "prediction_type": "epsilon", "solver_order": 2, "algorithm_type": "dpmsolver++"}
_WORDS = ("a an the of on in with and photo image background shape sks red green blue yellow orange purple white "
          "black circle square triangle star cat dog small large")


def t5_tokenizer():
    """A ``T5Tokenizer`` (Unigram, ids ``<pad>=0 </s>=1 <unk>=2``) over the shapes words and single characters."""
    from transformers import T5Tokenizer

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(f"\u2581{w}", -3.0 - i / 100) for i, w in enumerate(_WORDS.split())]
    vocab += [(c, -8.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789.,'-"]
    return T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=512)


def _t5(tokenizer):  # its vocabulary in multiples of 8
    config = tiny.resolve("transformers:T5Config")(vocab_size=-(-len(tokenizer) // 8) * 8, **T5)
    return tiny.resolve("transformers:T5EncoderModel")(config).eval()


def _scaling_factor(vae) -> None:  # 1 / std of a few shapes images' latents (what 0.18215 is for the SD VAE)
    latents = vae.encode(tiny.shapes_pixels(RESOLUTION, 0)).latent_dist.mode()
    vae.register_to_config(scaling_factor=tiny.scaling_factor(latents))


def tiny_pixart(seed: int = 0) -> tiny.TinyPipeline:
    """The tiny ``PixArtAlphaPipeline`` (fp32), each part from its own seed."""
    return tiny.TinyPipeline(
        pipeline="diffusers:PixArtAlphaPipeline", seed=seed, tokenizer=t5_tokenizer,
        marker={"kind": "pixart", "seed": seed, "version": TINY_PIXART_VERSION},
        scheduler=("diffusers:DPMSolverMultistepScheduler", SCHEDULER),
        parts=(tiny.module("transformer", 1, "diffusers:PixArtTransformer2DModel", TRANSFORMER),
               tiny.module("vae", 2, "diffusers:AutoencoderKL", VAE, then=_scaling_factor),
               tiny.Part("text_encoder", 3, _t5)))


def build_tiny_pixart_pipeline(path: str | Path, seed: int = 0) -> Path:
    """Write a random tiny ``PixArtAlphaPipeline`` to ``path`` (idempotent, atomic); return ``path``."""
    return tiny.build_pipeline(path, tiny_pixart(seed))
