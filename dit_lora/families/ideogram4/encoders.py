"""Ideogram 4's encoders: images through ``AutoencoderKLFlux2`` into latents patched 2 x 2 with each patch's channels
ordered ``(ph, pw, C)`` and normalised by the VAE's batch-norm statistics (what ``Ideogram4Pipeline`` undoes before
decoding, and diffusers' ``train_dreambooth_lora_ideogram4.py`` computes), captions through the pipeline's own
``encode_prompt`` (its chat template, Qwen3-VL's hidden states at 13 tapped layers side by side: 53,248 features a
token for the 8B encoder), cached ragged: each caption keeps its own tokens only
(:data:`~dit_lora.data.text_padding.LENGTHS`), where the pipeline pads every one to 2,048."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.data.text_padding import LENGTHS
from dit_lora.families.ideogram4.state import run_state
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.loader import model_class
from dit_lora.kit.prompts import CaptionLength
from dit_lora.kit.text_conditioned import encoder_identity

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: ``--max_sequence_length``, else Ideogram4Pipeline's default, 2048 (the chat template's tokens count in it; the
#: pipeline refuses a longer prompt rather than cut it)
max_sequence_length = CaptionLength(2048)
#: the batch key of the captions' token counts (host int64), beside the ragged ``prompt_embeds``
LENGTHS_KEY = "prompt_embeds" + LENGTHS
#: Qwen's chat turn around each caption, inside the caption length (the caption-length report counts it)
CHAT_TURN = "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"


def text_pipeline(comps: Components) -> Any:
    """An ``Ideogram4Pipeline`` of the run's tokenizer and Qwen3-VL alone: its ``encode_prompt`` is what the pipeline
    feeds the transformer."""
    return model_class("diffusers", "Ideogram4Pipeline")(
        scheduler=None, vae=None, transformer=None, unconditional_transformer=None,
        tokenizer=comps.encoders["tokenizer"], text_encoder=comps.encoders["text_encoder"],
    )  # fmt: skip


def caption_tokens(tokenizer, caption: str) -> int:
    """The tokens ``Ideogram4Pipeline.encode_prompt`` encodes for ``caption``: its chat turn, tokenized as it does
    (counted on the host, never read back from the device)."""
    messages = [{"role": "user", "content": [{"type": "text", "text": caption}]}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_lengths(lengths: list[int], captions: list[str], limit: int, what: str = "caption(s)") -> None:
    """Text over the run's caption length is one paragraph (the pipeline would raise): the run's report stops on a
    training caption before anything is encoded; this stops what it does not see (``what``: the validation prompt,
    a caption encoded in the step)."""
    over = [(n, c) for n, c in zip(lengths, captions, strict=True) if n > limit]
    if over:
        tokens, caption = max(over)
        raise UserError(
            f"{len(over)} {what} longer than the caption length, {limit} tokens (the longest, {tokens} tokens with its "
            f"chat turn, begins {caption[:60]!r}). Ideogram4Pipeline refuses such a prompt rather than cut it, so "
            "training does too: shorten it, or pass a larger --max_sequence_length (the pipeline's default is 2048)."
        )


def packed_latents(vae, pixel_values: torch.Tensor) -> torch.Tensor:
    """``(B, 3, H, W)`` in [-1, 1] -> ``(B, 4C, H/16, W/16)``: the VAE posterior's mode, each 2 x 2 patch's channels
    ordered ``(ph, pw, C)`` (the inverse of ``Ideogram4Pipeline``'s decode, ``permute(0, 5, 1, 3, 2, 4)``), then
    ``(z - mean) / sqrt(var + eps)`` by the VAE's batch-norm statistics, in fp32."""
    with torch.no_grad():
        z = vae.encode(pixel_values.to(vae.device, vae.dtype)).latent_dist.mode().float()
    batch, channels, height, width = z.shape
    patched = z.view(batch, channels, height // 2, 2, width // 2, 2).permute(0, 3, 5, 1, 2, 4)
    patched = patched.reshape(batch, 4 * channels, height // 2, width // 2)
    mean = vae.bn.running_mean.view(1, -1, 1, 1).to(patched)
    std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(patched)
    return (patched - mean) / std


def own_tokens(features: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """The pipeline's left-padded ``(B, L, F)`` caption features as each caption's own tokens first, zero after
    (``(B, longest, F)``): the ragged layout the cache keeps."""
    out = features.new_zeros(features.shape[0], max(lengths), features.shape[-1])
    for row, n in enumerate(lengths):
        out[row, :n] = features[row, features.shape[1] - n :]
    return out


class Ideogram4Encoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the latent cache's encoders and how a run encodes captions."""

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length, the chat turn counted with each caption, a longer caption refused (the
        caption-length report stops the run on one before anything is encoded)."""
        return TextSettings(max_sequence_length=max_sequence_length(cfg.data), prefix=CHAT_TURN, refused=True)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant and text dtype (a caption's features do not depend on the caption
        length: it only refuses the longer ones)."""
        return encoder_identity(cfg, "ideogram4")

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """:func:`packed_latents`."""
        return packed_latents(comps.encoders["vae"], pixel_values)

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through ``Ideogram4Pipeline.encode_prompt`` (no image grid: the caption's features alone), in the
        text encoder's dtype (the pipeline casts them to the transformer's), each caption's own tokens first with
        their counts (``prompt_embeds_lengths``, host int64). No negative: the pipeline's unconditional branch is
        zeroed features through its own transformer."""
        limit = max_sequence_length.recorded(run_state(comps).text)
        lengths = [caption_tokens(comps.encoders["tokenizer"], c) for c in captions]
        check_lengths(lengths, list(captions), limit, "--validation_prompt is" if with_negative else "caption(s) are")
        encoder = comps.encoders["text_encoder"]
        with torch.no_grad():
            features, *_ = text_pipeline(comps).encode_prompt(
                list(captions), grid_h=0, grid_w=0, max_sequence_length=max(lengths), device=encoder.device
            )
        return {"prompt_embeds": own_tokens(features.to(encoder.dtype), lengths), LENGTHS_KEY: torch.tensor(lengths)}
