"""Qwen-Image's loss (rectified flow on the packed latent, as diffusers' ``train_dreambooth_lora_qwen_image.py`` and
musubi-tuner's ``qwen_image_train_network.py`` compute it) and its data stage (the cached caption length every batch
is cut to).

One micro-batch: noise ``eps`` like the latents, then ``u`` from the run's density (``--weighting_scheme``, from the
same generator, in that order), ``sigma`` = ``u`` shifted for the batch's resolution (:mod:`.shift`),
``x_t = (1 - sigma) x0 + sigma eps``, both packed into 2 x 2 patches as ``QwenImagePipeline._pack_latents`` packs
them, the transformer given ``timestep = sigma`` (the pipeline passes ``t / 1000`` with ``t = 1000 sigma``) and
``img_shapes`` ``[(1, h/2, w/2)]``, and the MSE against ``eps - x0`` weighted per sample by
``compute_loss_weighting_for_sd3`` (1 unless ``sigma_sqrt``/``cosmap``). Packing is a permutation, so comparing packed
prediction and packed target is the scripts' unpacked MSE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.data.text_padding import cut_text_padding
from dit_lora.families.qwenimage.encoders import max_sequence_length
from dit_lora.families.qwenimage.shift import image_seq_len, shift_factor, shifted_sigmas
from dit_lora.families.qwenimage.state import run_state
from dit_lora.kit.components import DiffusionLoss
from dit_lora.kit.text_padding import TrimmedTextData
from dit_lora.modeling.flow_matching import density_draws, loss_weighting, noisy_latents, velocity_target
from dit_lora.modeling.masked_loss import weighted_or_masked_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the cache's name of the caption mask (the pipeline's ``prompt_embeds_mask``)
MASK_KEY = "prompt_embeds_mask"


def pack_latents(latents: torch.Tensor) -> torch.Tensor:
    """``(B, C, H, W)`` -> ``(B, H/2 * W/2, 4C)``: QwenImagePipeline's ``_pack_latents`` (2 x 2 patches, channels first
    within a patch)."""
    batch, channels, height, width = latents.shape
    patches = latents.view(batch, channels, height // 2, 2, width // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(batch, (height // 2) * (width // 2), channels * 4)


def draw_sigmas(
    latents: torch.Tensor, scheduler_config: dict[str, Any], options, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(noise, sigmas [B])``: noise like ``latents`` first, then ``u`` from the run's density, shifted for the
    latents' size (all on the latents' device: no host read)."""
    noise = torch.randn(latents.shape, generator=generator, device=latents.device, dtype=latents.dtype)
    u = density_draws(options, latents.shape[0], latents.device, generator)
    factor = shift_factor(
        options.qwen_shift_mode, image_seq_len(*latents.shape[-2:]), scheduler_config, options.qwen_fixed_shift
    )
    return noise, shifted_sigmas(u.float().clamp(0.0, 1.0), factor).to(latents.dtype)


class QwenImageLoss(DiffusionLoss):
    """``FamilySpec.loss``: the flow-matching loss of one micro-batch (batches prepared by the diffusion base)."""

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise at the shifted sigmas, the velocity predicted on the packed latent, the weighted MSE against it."""
        latents, options, state = batch["latents"], cfg.family_options, run_state(comps)
        noise, sigmas = draw_sigmas(latents, state.scheduler_config, options, generator)
        noisy = noisy_latents(latents, noise, sigmas)
        embeds, mask = cut_text_padding(batch["prompt_embeds"], batch[MASK_KEY], state.text_tokens)
        hidden, img_shapes = self.image_tokens(batch, pack_latents(noisy))
        pred = model(
            hidden_states=hidden,
            encoder_hidden_states=embeds,
            encoder_hidden_states_mask=mask,
            timestep=sigmas,
            img_shapes=img_shapes,
            return_dict=False,
        )[0]
        target = pack_latents(velocity_target(latents, noise))
        weighting = loss_weighting(options.weighting_scheme, sigmas)
        # the target's tokens come first; an edit model's control tokens after them are only context (and unmasked)
        pred = pred[:, : target.shape[1]]

        def pack(weights: torch.Tensor) -> torch.Tensor:  # --masked_loss: per latent pixel, packed as the latents are
            return pack_latents(weights.expand(-1, latents.shape[1], -1, -1))

        return weighted_or_masked_mse(pred, target, weighting, batch, cfg.data, pack)

    def image_tokens(self, batch: dict[str, Any], packed: torch.Tensor) -> tuple[torch.Tensor, list]:
        """The transformer's image sequence and its ``img_shapes`` (the RoPE grid of each image in it): the packed
        noisy latent alone here (an edit model appends its control latents)."""
        height, width = batch["latents"].shape[-2:]
        return packed, [[(1, height // 2, width // 2)]] * packed.shape[0]


class QwenImageData(TrimmedTextData):
    """``FamilySpec.data``: the standard image data (an Edit model's: each sample with its control images,
    ``edit_data.EditMedia``), then (cached) the caption length every batch is cut to (the kit's
    :class:`~dit_lora.kit.text_padding.TrimmedTextData`)."""

    def __init__(self, edit: str | None = None) -> None:
        super().__init__(max_sequence_length, run_state, mask_key=MASK_KEY)
        self.edit = edit  # None (text-to-image), "edit" or "edit_plus"

    def data_handler(self, cfg: TrainConfig, spec):
        """The image handler; the Edit models' reads and checks the control images too."""
        if self.edit is None:
            return super().data_handler(cfg, spec)
        # imported here to keep text-to-image's imports lean
        from dit_lora.kit.edit_data import ControlFlags, EditMedia

        flags = ControlFlags(
            "qwen_control_column", "qwen_control_dir", "Qwen-Image-Edit",
            ", or train Qwen-Image-Edit-2509/2511 (QwenImageEditPlusPipeline), which take several",
        )  # fmt: skip
        return EditMedia(cfg, spec, single=self.edit == "edit", flags=flags)
