"""The masked loss: the generic rule (modeling/masked_loss.py) and, for every image family's own loss, that a mask
changes only the masked positions' gradients.

Each family's ``compute_loss`` runs on tiny tensors with a probe for a model (its ``masked_loss_probe`` in
``tests/families/<package>/cases.py``, on tests/support/loss_probe.py): its output is a parameter shaped as the
family's transformer output (packed tokens for Qwen-Image and FLUX.2, a list for Z-Image, epsilon and variance
channels for DiT), so its gradient is the loss's gradient with respect to the prediction. Every name that reads
``--masked_loss`` is probed; the registry says which. With a mask that is zero on
the left half of the latent grid, those positions get exactly zero gradient and the others exactly the unmasked
loss's (times ``1 / mean(mask)`` = 2 with ``--normalize_masked_area_loss``); the same generator gives both runs the
same noise and timesteps.
"""

from __future__ import annotations

import pytest
import torch
from family_cases import case
from loss_probe import B, C, H, W

from dit_lora.config import TrainConfig
from dit_lora.modeling.masked_loss import MASK_KEY, mask_weights, masked_mse


def _mask() -> torch.Tensor:
    mask = torch.ones(B, 1, H, W)
    mask[..., : W // 2] = 0.0  # the left half of every sample is masked out
    return mask


def test_masked_mse_weights_each_pixel_and_clamps_to_the_unmasked_weight():
    pred, target = torch.zeros(1, 2, 1, 2), torch.tensor([[[[1.0, 2.0]], [[1.0, 2.0]]]])
    weights = torch.tensor([[[[0.25, 1.0]]]])
    # mean over 4 elements of w * e: (0.25 + 4 + 0.25 + 4) / 4
    assert masked_mse(pred, target, weights).item() == pytest.approx(8.5 / 4)
    assert masked_mse(pred, target, weights, normalize=True).item() == pytest.approx(8.5 / 4 / 0.625)
    assert masked_mse(pred, target, weights, torch.tensor([2.0])).item() == pytest.approx(8.5 / 2)
    cfg = TrainConfig.for_family("sana", masked_loss=True, unmasked_weight=0.5)
    got = mask_weights({MASK_KEY: torch.tensor([[[[0.0, 0.25, 0.75, 1.0]]]])}, cfg.data)
    assert got.tolist() == [[[[0.5, 0.5, 0.75, 1.0]]]]  # max(mask, --unmasked_weight), as OneTrainer clamps
    assert mask_weights({}, cfg.data) is None


def _readers() -> list[str]:
    """Every registered name that reads --masked_loss (config/applies.py's tag)."""
    from dit_lora.config.applies import families_for, tagged_options

    return sorted(families_for(tagged_options()["masked_loss"]))


def _probed_as(family: str) -> str:
    """The name whose probe checks ``family``'s loss: its own, or another name of the same loss class (its family's
    ``MASKED_LOSS_SAME``: Qwen-Image-Edit-Plus's is Edit's, with more control images)."""
    return case(family, "MASKED_LOSS_SAME", "tests/modeling/test_masked_loss.py", per_name=True, default=family)


def test_every_family_reading_the_mask_options_is_probed():
    """Each registered name that reads --masked_loss has a probe in its family's cases, directly or through another
    name of the same loss class: a new image family fails here until it has one."""
    from dit_lora.registry import get_spec

    for name in _readers():
        probed = _probed_as(name)
        assert callable(case(probed, "masked_loss_probe", "tests/modeling/test_masked_loss.py")), name
        assert type(get_spec(name).loss) is type(get_spec(probed).loss), name


def _grad(family: str, mask: torch.Tensor | None, **options) -> torch.Tensor:
    """The gradient of ``family``'s loss with respect to its prediction, on the latent grid ``(B, C, H, W)``."""
    probe_of = case(family, "masked_loss_probe", "tests/modeling/test_masked_loss.py")
    loss_fn, comps, batch, probe, to_grid = probe_of(family)
    cfg = TrainConfig.for_family(family, masked_loss=mask is not None, **options)
    batch = {**batch, "latents": torch.randn(B, C, H, W, generator=torch.Generator().manual_seed(2))}
    if mask is not None:
        batch[MASK_KEY] = mask
    loss = loss_fn.compute_loss(comps, probe, batch, torch.Generator().manual_seed(3), cfg)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    return to_grid(probe.out.grad)


@pytest.mark.parametrize("family", sorted({_probed_as(name) for name in _readers()}))
def test_a_mask_changes_only_the_masked_positions_gradients(family):
    plain = _grad(family, None)
    mask = _mask()
    masked = _grad(family, mask)
    off = mask.expand_as(plain) == 0
    assert (plain[off] != 0).all()  # the unmasked loss trains there ...
    assert (masked[off] == 0).all()  # ... the masked one exactly not
    assert torch.allclose(masked[~off], plain[~off], rtol=1e-6, atol=0)  # and elsewhere exactly as before
    # --normalize_masked_area_loss: the kept half's gradients times 1 / mean(mask) = 2
    normalized = _grad(family, mask, normalize_masked_area_loss=True)
    assert (normalized[off] == 0).all()
    assert torch.allclose(normalized[~off], 2 * plain[~off], rtol=1e-6, atol=0)
    # --unmasked_weight 0.25: the black half trains at a quarter of its unmasked gradient
    quarter = _grad(family, mask, unmasked_weight=0.25)
    assert torch.allclose(quarter[off], 0.25 * plain[off], rtol=1e-5, atol=0)
    assert torch.allclose(quarter[~off], plain[~off], rtol=1e-6, atol=0)


@pytest.mark.parametrize("family", ["sana", "zimage"])
def test_an_all_white_mask_is_the_unmasked_loss(family):
    plain = _grad(family, None)
    white = _grad(family, torch.ones(B, 1, H, W))
    assert torch.allclose(white, plain, rtol=1e-6, atol=0)


def test_an_all_ones_weight_is_weighted_mse():
    from dit_lora.modeling.flow_matching import weighted_mse

    pred, target, weighting = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4), torch.rand(2)
    ones = torch.ones(2, 1, 4, 4)
    assert torch.allclose(masked_mse(pred, target, ones, weighting), weighted_mse(pred, target, weighting))


def test_without_a_weighting_or_a_mask_the_loss_is_the_plain_mean_squared_error():
    from dit_lora.modeling.masked_loss import weighted_or_masked_mse

    # DiT's and Z-Image's loss: no per-sample weighting; the same bits as their own ((pred - target) ** 2).mean()
    pred, target = torch.randn(2, 3, 4, 4, dtype=torch.bfloat16), torch.randn(2, 3, 4, 4)
    cfg = TrainConfig.for_family("dit")
    plain = weighted_or_masked_mse(pred, target, None, {}, cfg.data)
    assert torch.equal(plain, ((pred.float() - target.float()) ** 2).mean())
    cfg = TrainConfig.for_family("dit", masked_loss=True)
    masked = weighted_or_masked_mse(pred, target, None, {MASK_KEY: torch.ones(2, 1, 4, 4)}, cfg.data)
    assert torch.equal(masked, masked_mse(pred, target, torch.ones(2, 1, 4, 4)))
