"""A tiny, randomly initialised Chroma pipeline built locally (no Hub access needed): a ``ChromaPipeline``
(``lodestones/Chroma1-HD``'s folder as ``save_pretrained`` writes it) with the T5 text encoder and its tokenizer
(trained offline on the demo captions), the FLUX ``AutoencoderKL`` (its shift and scale measured on a few shapes
images, as the real VAE's define them) and the scheduler config. Module names are the real ones; only widths and
depths shrink (``demo.json``)."""

from __future__ import annotations

from dit_lora.data.synthetic.tokenizers import build_tiny_t5_tokenizer
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny configs and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__, keys=("resolution", "transformer", "vae", "text_encoder", "scheduler"), what="tiny Chroma variant"
)


def _tiny(variant: str, seed: int) -> tiny.TinyPipeline:
    """The tiny ``ChromaPipeline`` (fp32)."""
    config = DEMO.read().variant(variant)
    t5_ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id", "decoder_start_token_id": "pad_token_id"}
    return tiny.described(
        DEMO, "ChromaPipeline", seed, config, ("variant", variant),
        tokenizer=build_tiny_t5_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:ChromaTransformer2DModel", config["transformer"]),
            tiny.module("vae", 2, "diffusers:AutoencoderKL", config["vae"], then=tiny.measured_scaling(config["resolution"], 0, shift=True)),
            tiny.text_model(3, "transformers:T5EncoderModel", "transformers:T5Config", config["text_encoder"], t5_ids),
        ),
    )  # fmt: skip


#: the tiny ChromaPipeline: its components in memory and the pipeline written to a folder
#: (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_chroma_components, build_tiny_chroma_pipeline = tiny.builders(_tiny, "hd")
