"""The masked loss (``--masked_loss``): each latent pixel's squared error weighted by its sample's mask.

The data path (:mod:`dit_lora.data.masks`) puts each sample's mask, averaged over the latent grid, in the batch as
``loss_mask`` (``(B, 1, h, w)`` in [0, 1]: the grid of the latents the family's loss compares). Every image family's
loss calls :func:`mask_weights` and :func:`masked_mse`, so the rule is written once (OneTrainer's
``masked_losses``):

- a latent pixel weighs ``max(mask, --unmasked_weight)`` (clamped to 1), the same for every channel of it (a packed
  family packs the weights as it packs its latents);
- a sample's loss is the mean over its elements of ``weight * (pred - target)^2``: with a 0/1 mask, the gradient at a
  masked-out position is exactly zero and elsewhere exactly the unmasked loss's gradient (the mean still divides by
  every element, so a sample's loss shrinks with its masked area);
- ``--normalize_masked_area_loss`` divides it by the sample's mean weight, so a small area trains as strongly as a
  whole image (its gradients are the unmasked loss's times ``1 / mean weight``);
- then the family's per-sample weighting (``compute_loss_weighting_for_sd3``, or none) and the batch mean, as
  :func:`~dit_lora.modeling.flow_matching.weighted_mse`.

Without a mask in the batch a family keeps its own unmasked expression, bit for bit (:func:`weighted_or_masked_mse`:
the flow families' :func:`~dit_lora.modeling.flow_matching.weighted_mse`, or the masked one). Nothing here reads the
device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.modeling.flow_matching import weighted_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions

#: the batch's (and the latent cache's) name of the latent-grid mask
MASK_KEY = "loss_mask"
#: the smallest mean weight :func:`masked_mse` divides by (an all-black mask is refused before training; this keeps
#: a division by zero out of the step whatever reaches it)
_MIN_MEAN = 1e-6

__all__ = ["MASK_KEY", "mask_weights", "masked_mse", "weighted_or_masked_mse"]


def mask_weights(batch: dict[str, Any], data: DataOptions) -> torch.Tensor | None:
    """The per-latent-pixel weights of a batch, ``max(mask, --unmasked_weight)`` as float32 ``(B, 1, h, w)``, or
    None when the batch has no mask (``--masked_loss`` off)."""
    mask = batch.get(MASK_KEY)
    if mask is None:
        return None
    return mask.float().clamp(min=float(data.unmasked_weight), max=1.0)


def masked_mse(
    pred: torch.Tensor,
    target: torch.Tensor,
    weights: torch.Tensor,
    weighting: torch.Tensor | None = None,
    *,
    normalize: bool = False,
) -> torch.Tensor:
    """``mean_b(w_b * mean(W * (pred_b - target_b)^2) [/ mean(W_b)])`` in fp32, a 0-d tensor.

    ``weights`` (``W``) broadcasts over ``pred`` (``(B, 1, h, w)`` against ``(B, C, h, w)``, or already laid out as
    the prediction is, e.g. packed tokens); ``weighting`` (``w_b``, ``[B]``) is the family's per-sample weighting
    (None: 1); ``normalize`` divides each sample by its mean weight (``--normalize_masked_area_loss``).
    """
    error = (pred.float() - target.float()) ** 2
    weights = weights.to(error.dtype)
    per_sample = (error * weights).flatten(1).mean(1)
    if normalize:  # the mean of W over the broadcast equals its own mean: every pixel is repeated alike
        per_sample = per_sample / weights.flatten(1).mean(1).clamp(min=_MIN_MEAN)
    if weighting is None:
        return per_sample.mean()
    return (weighting.float() * per_sample).mean()


def weighted_or_masked_mse(
    pred: torch.Tensor,
    target: torch.Tensor,
    weighting: torch.Tensor | None,
    batch: dict[str, Any],
    data: DataOptions,
    pack: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """A diffusion family's loss: :func:`~dit_lora.modeling.flow_matching.weighted_mse` (``weighting`` None: the
    plain mean of the squared error, as DiT and Z-Image train), or with a mask in the batch (``--masked_loss``)
    :func:`masked_mse` with its weights (``pack``: laid out as the family packs its latents)."""
    weights = mask_weights(batch, data)
    if weights is None:
        if weighting is None:
            return ((pred.float() - target.float()) ** 2).mean()
        return weighted_mse(pred, target, weighting)
    weights = weights if pack is None else pack(weights)
    return masked_mse(pred, target, weights, weighting, normalize=data.normalize_masked_area_loss)
