"""A tiny, randomly initialised Krea 2 pipeline built locally (no Hub access needed): a ``Krea2Pipeline``
(``krea/Krea-2-Raw``'s folder as ``save_pretrained`` writes it) with a Qwen3-VL text encoder (its hidden states
tapped at ``text_encoder_select_layers``, saved in ``model_index.json`` as the pipeline registers it) and a Qwen
tokenizer trained offline on the pipeline's prompt template and the demo captions, the Qwen-Image VAE (per-channel
latent statistics that are not 0 and 1) and the scheduler config Krea2Pipeline's docstring names. Module names are
the real ones; only widths and depths shrink (``demo.json``)."""

from __future__ import annotations

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import demo_words
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny configs and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("resolution", "transformer", "text_encoder_select_layers", "vae", "text", "vision", "scheduler"),
    what="tiny Krea 2 variant",
)
#: Qwen's chat and vision special tokens (Qwen3-VL's config names the vision ones)
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>")  # fmt: skip


def build_tiny_krea2_tokenizer():
    """A byte-level BPE ``Qwen2Tokenizer`` trained here on Krea2Pipeline's prompt template and the demo captions."""
    from diffusers import Krea2Pipeline

    pipe = Krea2Pipeline(scheduler=None, vae=None, text_encoder=None, tokenizer=None, transformer=None)
    template = pipe.prompt_template_encode_prefix + pipe.prompt_template_encode_suffix
    return tiny.qwen2_tokenizer(demo_words(template, SHAPES_VALIDATION_PROMPT), 600, SPECIAL)


def _tiny(variant: str, seed: int) -> tiny.TinyPipeline:
    """The tiny ``Krea2Pipeline`` (fp32)."""
    config = DEMO.read().variant(variant)
    return tiny.described(
        DEMO, "Krea2Pipeline", seed, config, ("variant", variant),
        tokenizer=build_tiny_krea2_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:Krea2Transformer2DModel", config["transformer"]),
            tiny.module("vae", 2, "diffusers:AutoencoderKLQwenImage", config["vae"]),
            tiny.qwen3_vl(3, config["text"], config["vision"]),
        ),
        pipeline_kwargs={"text_encoder_select_layers": tuple(config["text_encoder_select_layers"])},
    )  # fmt: skip


#: the tiny Krea2Pipeline: its components in memory and the pipeline written to a folder
#: (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_krea2_components, build_tiny_krea2_pipeline = tiny.builders(_tiny, "raw")
