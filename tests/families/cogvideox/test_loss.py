"""families/cogvideox/loss.py: the reference loss math (the tiny pipelines: tests/families/cogvideox/test_demo.py)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.families.cogvideox.loss import (
    WEIGHT_REFERENCE,
    add_noise,
    cogvideox_loss_weights,
    cogvideox_v_loss,
    sample_timesteps,
)


def _scheduler(snr_shift_scale: float):
    from diffusers import CogVideoXDDIMScheduler

    return CogVideoXDDIMScheduler(
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        prediction_type="v_prediction",
        rescale_betas_zero_snr=True,
        set_alpha_to_one=True,
        clip_sample=False,
        timestep_spacing="trailing",
        snr_shift_scale=snr_shift_scale,
    )


def test_weights_match_anchor_figures():
    for shift, expected in WEIGHT_REFERENCE.items():
        sched = _scheduler(shift)
        t = torch.tensor(sorted(expected))
        w = cogvideox_loss_weights(sched, t)
        torch.testing.assert_close(w, torch.tensor([expected[k] for k in sorted(expected)]), rtol=2e-3, atol=0)
    # The ANCHORS figures: ~1177 at t=0 (shift 1.0), ~393 (shift 3.0), 8.8 / 1.3 / 1.0.
    w1 = cogvideox_loss_weights(_scheduler(1.0), torch.tensor([0, 100, 500, 999]))
    assert round(float(w1[0])) == 1176 and abs(float(w1[0]) - 1177) < 1
    assert round(float(w1[1]), 1) == 8.8 and round(float(w1[2]), 1) == 1.3 and float(w1[3]) == pytest.approx(1.0)
    w3 = cogvideox_loss_weights(_scheduler(3.0), torch.tensor([0, 999]))
    assert round(float(w3[0])) == 393 and float(w3[1]) == pytest.approx(1.0)
    capped = cogvideox_loss_weights(_scheduler(1.0), torch.tensor([0, 100, 999]), weight_cap=5.0)
    torch.testing.assert_close(capped, torch.tensor([5.0, 5.0, 1.0]))


def test_loss_against_hand_computation():
    sched = _scheduler(1.0)
    ac = sched.alphas_cumprod.double()
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(3, 2, 4, 2, 2, generator=g)  # [B, F, C, H, W]
    noise = torch.randn(x0.shape, generator=g)
    t = torch.tensor([0, 250, 900])
    xt = add_noise(sched, x0, noise, t)
    a = ac[t].view(-1, 1, 1, 1, 1)
    torch.testing.assert_close(xt.double(), a.sqrt() * x0 + (1 - a).sqrt() * noise, rtol=1e-5, atol=1e-5)

    # The exact v recovers x0 exactly: zero loss.
    v_true = (a.sqrt() * noise - (1 - a).sqrt() * x0).float()
    loss0, per0 = cogvideox_v_loss(v_true, xt, x0, t, sched)
    assert float(per0.abs().max()) < 1e-6

    v_pred = v_true + 0.1 * torch.randn(x0.shape, generator=g)
    x0_hat = a.sqrt() * xt.double() - (1 - a).sqrt() * v_pred.double()
    mse = (x0_hat - x0.double()).pow(2).flatten(1).mean(1)
    w = 1.0 / (1.0 - ac[t])
    loss, per = cogvideox_v_loss(v_pred, xt, x0, t, sched)
    torch.testing.assert_close(per.double(), w * mse, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(loss.double(), (w * mse).mean(), rtol=1e-4, atol=1e-6)
    # Weighted x0 loss == plain v MSE.
    torch.testing.assert_close(per.double(), (v_pred - v_true).double().pow(2).flatten(1).mean(1), rtol=1e-3, atol=1e-6)

    loss_c, per_c = cogvideox_v_loss(v_pred, xt, x0, t, sched, weight_cap=10.0)
    torch.testing.assert_close(per_c.double(), w.clamp(max=10.0) * mse, rtol=1e-4, atol=1e-6)
    assert float(per_c[0]) < float(per[0]) and float(per_c[2]) == pytest.approx(float(per[2]))

    with pytest.raises(ValueError):
        cogvideox_v_loss(v_pred[:, :1], xt, x0, t, sched)
    with pytest.raises(ValueError):
        cogvideox_v_loss(v_pred, xt, x0, t[:2], sched)


def test_sample_timesteps():
    a = sample_timesteps(64, 1000, generator=torch.Generator().manual_seed(1))
    b = sample_timesteps(64, 1000, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.dtype == torch.int64 and a.shape == (64,)
    assert int(a.min()) >= 0 and int(a.max()) < 1000
    ln = sample_timesteps(4096, 1000, sampling="logit_normal", generator=torch.Generator().manual_seed(2))
    assert int(ln.min()) >= 0 and int(ln.max()) <= 999
    assert abs(float(ln.float().mean()) - 500) < 20 and float(ln.float().std()) < 288 - 50  # peaked at the middle
    with pytest.raises(ValueError):
        sample_timesteps(2, 1000, sampling="bogus")
