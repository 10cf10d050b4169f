"""The masked loss: the generic rule (modeling/masked_loss.py) and, for every image family's own loss, that a mask
changes only the masked positions' gradients.

Each family's ``compute_loss`` runs on tiny tensors with a probe for a model: its output is a parameter shaped as the
family's transformer output (packed tokens for Qwen-Image and FLUX.2, a list for Z-Image, epsilon and variance
channels for DiT), so its gradient is the loss's gradient with respect to the prediction. With a mask that is zero on
the left half of the latent grid, those positions get exactly zero gradient and the others exactly the unmasked
loss's (times ``1 / mean(mask)`` = 2 with ``--normalize_masked_area_loss``); the same generator gives both runs the
same noise and timesteps.
"""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.modeling.masked_loss import MASK_KEY, mask_weights, masked_mse

B, C, H, W = 2, 4, 4, 6  # latent grid: even sides (Qwen-Image packs 2 x 2 patches)


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


class Probe(torch.nn.Module):
    """A stand-in transformer whose output is a parameter (``shape``), laid out by ``wrap`` as the family's is."""

    def __init__(self, shape, wrap=lambda out: out):
        super().__init__()
        self.out, self.wrap = torch.nn.Parameter(torch.randn(shape, generator=torch.Generator().manual_seed(1))), wrap

    def forward(self, *args, **kwargs):
        return (self.wrap(self.out),)


def _sana():
    from diffusers import FlowMatchEulerDiscreteScheduler

    from dit_lora.families.sana.loss import SanaLoss

    comps = Components(model=None, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_attention_mask": torch.ones(B, 3, dtype=torch.long)}
    return SanaLoss(None), comps, batch, Probe((B, C, H, W)), lambda g: g


def _dit():
    from diffusers import DDPMScheduler

    from dit_lora.families.dit.loss import DiTLoss
    from dit_lora.families.dit.state import DiTRun

    state = DiTRun(learned_sigma=True, in_channels=C, null_class=10)
    comps = Components(model=None, scheduler=DDPMScheduler(num_train_timesteps=1000), state=state)
    # learned sigma: the probe predicts 2C channels; the variance half never reaches the loss (no VLB term)
    return DiTLoss(None), comps, {"class_labels": torch.zeros(B, dtype=torch.long)}, Probe((B, 2 * C, H, W)), (
        lambda g: g[:, :C]
    )


def _qwen(edit: bool = False):
    from dit_lora.families.qwenimage.edit import EditLoss
    from dit_lora.families.qwenimage.loss import QwenImageLoss, pack_latents
    from dit_lora.families.qwenimage.state import QwenImageRun

    comps = Components(model=None, state=QwenImageRun(scheduler_config={}))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_embeds_mask": torch.ones(B, 3, dtype=torch.long)}
    tokens = (H // 2) * (W // 2)
    if edit:  # one control image: its tokens follow the target's, context only
        batch["control_latents"] = torch.randn(B, 1, C, H, W)
    probe = Probe((B, tokens * (2 if edit else 1), 4 * C))

    def to_grid(g):  # the target's tokens back to (B, C, H, W), checking the control tokens got nothing
        if edit:
            assert (g[:, tokens:] == 0).all()
        packed = g[:, :tokens].reshape(B, H // 2, W // 2, C, 2, 2).permute(0, 3, 1, 4, 2, 5)
        grid = packed.reshape(B, C, H, W)
        assert torch.equal(pack_latents(grid), g[:, :tokens])  # the inverse of the family's packing
        return grid

    return (EditLoss if edit else QwenImageLoss)(None), comps, batch, probe, to_grid


def _zimage():
    from diffusers import FlowMatchEulerDiscreteScheduler

    from dit_lora.families.zimage.loss import ZImageLoss

    comps = Components(model=None, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "caption_lengths": [3, 2]}
    probe = Probe((B, C, 1, H, W), wrap=lambda out: list(out.unbind(0)))  # a list of (C, 1, H, W), as Z-Image's
    return ZImageLoss(None), comps, batch, probe, lambda g: g[:, :, 0]


def _flux2():
    from dit_lora.families.flux2.loss import Flux2Loss, unpack
    from dit_lora.families.flux2.state import Flux2Run

    comps = Components(model=None, state=Flux2Run(scheduler_config={}, guidance_embeds=False))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8)}
    return Flux2Loss(None), comps, batch, Probe((B, H * W, C)), lambda g: unpack(g, H, W)


def _flux(kontext: bool = False):
    from dit_lora.kit.packed import unpack
    from dit_lora.families.flux.edit import KontextLoss
    from dit_lora.families.flux.loss import FluxLoss
    from dit_lora.families.flux.state import FluxRun

    comps = Components(model=None, state=FluxRun(scheduler_config={}, guidance_embeds=False))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "pooled_prompt_embeds": torch.zeros(B, 4)}
    tokens = (H // 2) * (W // 2)
    if kontext:  # the control's tokens follow the target's, context only
        batch["control_latents"] = torch.randn(B, C, H, W)

    def to_grid(g):
        assert (g[:, tokens:] == 0).all()  # the control's tokens get no gradient
        return unpack(g[:, :tokens], H, W)

    probe = Probe((B, tokens * (2 if kontext else 1), 4 * C))
    return (KontextLoss if kontext else FluxLoss)(None), comps, batch, probe, to_grid


def _krea2():
    from dit_lora.kit.packed import unpack
    from dit_lora.families.krea2.loss import Krea2Loss
    from dit_lora.families.krea2.state import Krea2Run

    comps = Components(model=None, state=Krea2Run(scheduler_config={}))
    batch = {"prompt_embeds": torch.zeros(B, 3, 2, 8), "prompt_embeds_mask": torch.ones(B, 3, dtype=torch.bool)}
    return Krea2Loss(None), comps, batch, Probe((B, (H // 2) * (W // 2), 4 * C)), lambda g: unpack(g, H, W)


def _chroma():
    from dit_lora.families.chroma.loss import ChromaLoss
    from dit_lora.families.chroma.state import ChromaRun
    from dit_lora.kit.packed import unpack

    comps = Components(model=None, state=ChromaRun(scheduler_config={}))
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_attention_mask": torch.ones(B, 3, dtype=torch.bool)}
    return ChromaLoss(None), comps, batch, Probe((B, (H // 2) * (W // 2), 4 * C)), lambda g: unpack(g, H, W)


def _lumina2():
    from dit_lora.families.lumina2.loss import Lumina2Loss
    from dit_lora.families.lumina2.state import Lumina2Run

    from dit_lora.modeling.flow_matching import training_scheduler

    comps = Components(model=None, scheduler=training_scheduler({"shift": 6.0}), state=Lumina2Run())
    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "prompt_attention_mask": torch.ones(B, 3, dtype=torch.long)}
    return Lumina2Loss(None), comps, batch, Probe((B, C, H, W)), lambda g: g


def _ideogram4():
    from dit_lora.families.ideogram4.loss import Ideogram4Loss

    batch = {"prompt_embeds": torch.zeros(B, 3, 8), "caption_lengths": [3, 2]}  # the batch padded to its longest
    text = 3

    def to_grid(g):
        assert (g[:, :text] == 0).all()  # the caption's places get no gradient
        return g[:, text:].transpose(1, 2).reshape(B, C, H, W)

    return Ideogram4Loss(None), Components(model=None), batch, Probe((B, text + H * W, C)), to_grid


FAMILIES = {
    "sana": _sana,
    "dit": _dit,
    "qwenimage": _qwen,
    "qwenimage_edit": lambda: _qwen(edit=True),
    "zimage": _zimage,
    "flux2": _flux2,
    "flux": _flux,
    "flux_kontext": lambda: _flux(kontext=True),
    "chroma": _chroma,
    "lumina2": _lumina2,
    "krea2": _krea2,
    "ideogram4": _ideogram4,
}


#: a name whose loss is another name's loss class, probed there (Qwen-Image-Edit-Plus: Edit's, more control images)
SAME_LOSS = {"qwenimage_edit_plus": "qwenimage_edit"}


def test_every_family_reading_the_mask_options_is_probed():
    """FAMILIES covers each registered name that reads --masked_loss (config/applies.py's tag), directly or through
    another name of the same loss class: a new image family fails here until it has a probe."""
    from dit_lora.config.applies import families_for, tagged_options
    from dit_lora.registry import get_spec

    readers = set(families_for(tagged_options()["masked_loss"]))
    missing = readers - set(FAMILIES) - set(SAME_LOSS)
    assert set(FAMILIES) | set(SAME_LOSS) == readers, f"FAMILIES: add {sorted(missing)}"
    for name, probed in SAME_LOSS.items():
        assert type(get_spec(name).loss) is type(get_spec(probed).loss), name


def _grad(family: str, mask: torch.Tensor | None, **options) -> torch.Tensor:
    """The gradient of ``family``'s loss with respect to its prediction, on the latent grid ``(B, C, H, W)``."""
    loss_fn, comps, batch, probe, to_grid = FAMILIES[family]()
    name = "qwenimage" if family.startswith("qwenimage") else family
    cfg = TrainConfig.for_family(name, masked_loss=mask is not None, **options)
    batch = {**batch, "latents": torch.randn(B, C, H, W, generator=torch.Generator().manual_seed(2))}
    if mask is not None:
        batch[MASK_KEY] = mask
    loss = loss_fn.compute_loss(comps, probe, batch, torch.Generator().manual_seed(3), cfg)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    return to_grid(probe.out.grad)


@pytest.mark.parametrize("family", sorted(FAMILIES))
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
