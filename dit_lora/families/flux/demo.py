"""A tiny, randomly initialised FLUX.1 [dev] pipeline built locally (no Hub access needed): a ``FluxPipeline``
(``black-forest-labs/FLUX.1-dev``'s folder as ``save_pretrained`` writes it) with the guidance embedding, CLIP-L and
T5 text encoders and their tokenizers (trained offline on the demo captions), the FLUX ``AutoencoderKL`` (its shift
and scale measured on a few shapes images, as the real VAE's define them) and the real scheduler config. Module
names are the real ones; only widths and depths shrink (``demo.json``)."""

from __future__ import annotations

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import TOKENIZER_CORPUS_EXTRA, build_tiny_t5_tokenizer, demo_words
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny configs and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__, keys=("resolution", "transformer", "vae", "text_encoder", "text_encoder_2", "scheduler"),
    what="tiny FLUX.1 variant",
)  # fmt: skip


def build_clip_tokenizer():
    """CLIP-L's tokenizer as the pipeline uses it (lower-cased byte-level BPE, 77 tokens), trained offline."""
    words = demo_words(TOKENIZER_CORPUS_EXTRA, SHAPES_VALIDATION_PROMPT)
    return tiny.clip_tokenizer((" ".join(words), *words), 400)


#: each demo variant's pipeline class (Kontext's tiny model is [dev]'s, saved as a FluxKontextPipeline)
PIPELINES = {"dev": "FluxPipeline", "kontext": "FluxKontextPipeline"}


def _tiny(variant: str, seed: int) -> tiny.TinyPipeline:
    """The tiny ``FluxPipeline`` or ``FluxKontextPipeline`` (fp32; the same modules)."""
    if variant not in PIPELINES:
        raise ValueError(f"unknown tiny FLUX.1 variant {variant!r}; choose from {', '.join(PIPELINES)}")
    config = DEMO.read().variant("dev")
    clip_ids = {"bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id", "pad_token_id": "pad_token_id"}
    t5_ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id", "decoder_start_token_id": "pad_token_id"}
    return tiny.described(
        DEMO, PIPELINES[variant], seed, config, ("variant", variant),
        tokenizer=build_clip_tokenizer,
        tokenizers={"tokenizer_2": build_tiny_t5_tokenizer},
        parts=(
            tiny.module("transformer", 1, "diffusers:FluxTransformer2DModel", config["transformer"]),
            tiny.module("vae", 2, "diffusers:AutoencoderKL", config["vae"], then=tiny.measured_scaling(config["resolution"], 0, shift=True)),
            tiny.text_model(3, "transformers:CLIPTextModel", "transformers:CLIPTextConfig", config["text_encoder"], clip_ids),
            tiny.text_model(
                4, "transformers:T5EncoderModel", "transformers:T5Config", config["text_encoder_2"], t5_ids,
                name="text_encoder_2", tokenizer="tokenizer_2",
            ),
        ),
    )  # fmt: skip


#: the tiny FluxPipeline (kontext: FluxKontextPipeline): its components in memory and the pipeline written to a folder
#: (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_flux_components, build_tiny_flux_pipeline = tiny.builders(_tiny, "dev")
