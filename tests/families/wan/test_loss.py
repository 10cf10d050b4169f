"""families/wan/loss.py on tiny offline pipelines: the rectified-flow loss (expert timestep ranges, the hand-written
MSE, TI2V per-token timesteps and image mode, determinism, no host sync).

References (diffusers 0.42.1, ``pipelines/wan/pipeline_wan.py``): ``expand_timesteps`` (``timestep =
(mask[0][0][:, ::2, ::2] * t).flatten()``) and the expert switch (``transformer`` for ``t >= boundary_ratio *
num_train_timesteps``). The shifted table is ``FlowMatchEulerDiscreteScheduler.__init__``'s, written out by hand
here (:func:`hand_table`).
"""

from __future__ import annotations

import pytest
import torch
from wan_tables import hand_table, table_indices

from dit_lora.families.wan.demo import TINY_WAN_GEOMETRY
from dit_lora.families.wan.experts import WanExperts

FRAMES, HEIGHT, WIDTH = (TINY_WAN_GEOMETRY[k] for k in ("num_frames", "height", "width"))
PROMPTS = ["a red square moving left to right", "blue"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny models are far faster on one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- encoding --------------------------------------------------------------------------------------------------
def _draw(kit, family, cfg, comps, step=None, n=2000, seed=0):
    """Run compute_loss on ``n`` one-token latents with recording stand-ins; return (drawn timesteps, which expert)."""
    channels = comps.model.config.out_channels
    high, low = kit.Recorder(channels), kit.Recorder(channels)
    denoiser = WanExperts(high, low, offload=False) if isinstance(comps.model, WanExperts) else high
    batch = {"latents": torch.zeros(n, channels, 1, 2, 2), "prompt_embeds": torch.zeros(n, 1, 32)}
    if step is not None:
        batch["step"] = step
    family.loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(seed), cfg)
    (call,), who = (high.calls, "high") if high.calls else (low.calls, "low")
    assert not (high.calls and low.calls)
    return call["timestep"], who


RANGE_CASES = [  # (variant, --wan_expert, batch step, expert expected to run, part of the table)
    ("2.1-t2v", None, None, "high", "all"),
    ("2.2-t2v-a14b", "high", None, "high", "high"),
    ("2.2-t2v-a14b", "low", 2, "high", "low"),  # a single loaded expert is "the model", whatever the step
    ("2.2-t2v-a14b", "both", 1, "high", "high"),
    ("2.2-t2v-a14b", "both", 2, "low", "low"),
    ("2.2-t2v-a14b", "both", 7, "high", "high"),
    ("2.2-t2v-a14b", "both", None, "high", "high"),
    ("2.2-i2v-a14b", "both", 4, "low", "low"),
]


@pytest.mark.parametrize("sampling", ["uniform", "logit_normal"])
@pytest.mark.parametrize("case", RANGE_CASES, ids=lambda c: f"{c[0]}-{c[1]}-step{c[2]}")
def test_timesteps_are_drawn_from_the_expert_s_part_of_the_table(wan_load, wan_kit, case, sampling):
    variant, expert, step, runs, part = case
    family, cfg, comps = wan_load(
        variant,
        family="wan_i2v" if "i2v" in variant else "wan",
        **({"wan_expert": expert} if expert else {}),
        timestep_sampling=sampling,
    )
    t, who = _draw(wan_kit, family, cfg, comps, step)
    assert who == runs and t.shape == (2000,)
    boundary = 1000 * (comps.state.boundary_ratio or 0)
    _, table = hand_table(cfg.family_options.flow_shift or 3.0)
    own = {"all": table, "high": table[table >= boundary], "low": table[table < boundary]}[part]
    if part == "high":
        assert bool((t >= boundary).all())
    elif part == "low":
        assert bool((t < boundary).all())
    idx = table_indices(t, cfg.family_options.flow_shift or 3.0)
    first = int((table > own.max() + 1e-6).sum())
    assert first <= int(idx.min()) and int(idx.max()) < first + len(own)
    if sampling == "uniform":  # 2000 draws over at most 1000 entries reach both ends of the expert's part
        assert int(idx.min()) <= first + 5 and int(idx.max()) >= first + len(own) - 6


def test_uniform_draws_on_the_whole_table_reach_both_ends(wan_load, wan_kit):
    family, cfg, comps = wan_load("2.1-t2v")
    t, _ = _draw(wan_kit, family, cfg, comps, n=4000, seed=3)
    _, table = hand_table(3.0)
    assert float(t.max()) >= float(table[3]) and float(t.min()) <= float(table[-4])
    assert float(t.min()) < 30 and float(t.max()) > 999  # near 0 and 1000 on the shifted schedule


# ---- the loss -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "variant,options", [("2.1-t2v", {}), ("2.1-t2v", {"flow_shift": 5.0}), ("2.2-t2v-a14b", {"wan_expert": "low"})]
)
def test_loss_is_the_hand_written_rectified_flow_mse_of_the_recorded_forward(wan_load, wan_kit, variant, options):
    family, cfg, comps = wan_load(variant, **options)
    shift = options.get("flow_shift", 3.0)
    x0 = torch.randn(2, 16, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    batch = {"latents": x0, **family.encoders.encode_prompts(comps, PROMPTS)}
    model = wan_kit.Recorder(16, inner=comps.model)
    loss = family.loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(11), cfg)
    (call,) = model.calls

    sigmas, timesteps = hand_table(shift)
    first, end = 0, 1000
    if options.get("wan_expert") == "low":
        first = int((timesteps >= 875).sum())  # boundary_ratio 0.875 (Wan2.2 wan_t2v_A14B.py)
    replay = torch.Generator().manual_seed(11)  # the draw order: noise, then the table positions
    eps = torch.randn(x0.shape, generator=replay)
    idx = first + (torch.rand(2, generator=replay) * (end - first)).long()
    sigma = sigmas[idx].float().view(-1, 1, 1, 1, 1)
    torch.testing.assert_close(call["timestep"], timesteps[idx].float(), rtol=0, atol=1e-3)
    torch.testing.assert_close(call["hidden_states"], (1 - sigma) * x0 + sigma * eps, rtol=1e-5, atol=1e-5)
    assert call["encoder_hidden_states"] is batch["prompt_embeds"]
    expected = ((call["output"] - (eps - x0)) ** 2).mean()
    assert loss.dtype == torch.float32 and loss.ndim == 0
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


def _ti2v_call(kit, family, cfg, comps, latents, seed, answer=None):
    model = kit.Recorder(48, answer=answer)
    batch = {"latents": latents, "prompt_embeds": torch.zeros(latents.shape[0], 1, 32)}
    loss = family.loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(seed), cfg)
    return loss, model.calls[0]


@pytest.mark.parametrize("probability", [1.0, 0.0, 0.5])
def test_ti2v_per_token_timesteps_and_image_mode(wan_load, wan_kit, probability):
    """Per-token timesteps ``(B, tokens)``; image-mode samples (drawn after noise and table positions) have timestep
    0 on frame 0's tokens and their clean first latent frame; the others are noised everywhere."""
    family, cfg, comps = wan_load("2.2-ti2v", ti2v_image_probability=probability)
    assert comps.state.image_probability == probability and comps.state.expand_timesteps
    bsz = 8
    latents = torch.randn(bsz, 48, 3, 4, 4, generator=torch.Generator().manual_seed(2))
    _, call = _ti2v_call(wan_kit, family, cfg, comps, latents, seed=9)

    sigmas, timesteps = hand_table(5.0)  # TI2V-5B's flow_shift (scripts/convert_wan_to_diffusers.py)
    replay = torch.Generator().manual_seed(9)
    eps = torch.randn(latents.shape, generator=replay)
    idx = (torch.rand(bsz, generator=replay) * 1000).long()
    image = torch.rand(bsz, generator=replay) < probability
    if probability == 0.5:
        assert 0 < int(image.sum()) < bsz  # both modes in this batch
    per_frame = 2 * 2  # 4 x 4 latents, patch 2 x 2
    t = call["timestep"]
    assert t.shape == (bsz, 3 * per_frame)
    expected = timesteps[idx].float()[:, None].expand(bsz, 3 * per_frame).clone()
    expected[image, :per_frame] = 0.0
    torch.testing.assert_close(t, expected, rtol=0, atol=1e-3)
    assert bool((t[image, :per_frame] == 0).all()) and bool((t[~image] > 0).all())

    sigma = sigmas[idx].float().view(-1, 1, 1, 1, 1)
    noisy = (1 - sigma) * latents + sigma * eps
    hidden = call["hidden_states"]
    torch.testing.assert_close(hidden[:, :, 1:], noisy[:, :, 1:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hidden[image, :, 0], latents[image, :, 0], rtol=0, atol=0)  # clean, exactly
    torch.testing.assert_close(hidden[~image, :, 0], noisy[~image, :, 0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("probability", [1.0, 0.0])
def test_ti2v_image_mode_leaves_frame_zero_out_of_the_loss(wan_load, wan_kit, probability):
    family, cfg, comps = wan_load("2.2-ti2v", ti2v_image_probability=probability)
    latents = torch.randn(3, 48, 3, 4, 4, generator=torch.Generator().manual_seed(4))

    def zeros(h):
        return torch.zeros_like(h)

    def perturbed(h):
        out = torch.zeros_like(h)
        out[:, :, 0] = 5.0
        return out

    plain, _ = _ti2v_call(wan_kit, family, cfg, comps, latents, seed=1, answer=zeros)
    moved, _ = _ti2v_call(wan_kit, family, cfg, comps, latents, seed=1, answer=perturbed)
    replay = torch.Generator().manual_seed(1)
    eps = torch.randn(latents.shape, generator=replay)
    err = (eps - latents) ** 2  # a zero prediction against the velocity
    if probability == 1.0:
        assert torch.equal(plain, moved)
        torch.testing.assert_close(plain, err[:, :, 1:].mean(), rtol=1e-5, atol=1e-6)
    else:
        assert not torch.allclose(plain, moved)
        torch.testing.assert_close(plain, err.mean(), rtol=1e-5, atol=1e-6)


# ---- determinism and host syncs --------------------------------------------------------------------------------
SETUPS = [("2.1-t2v", {}), ("2.2-ti2v", {"ti2v_image_probability": 0.5}), ("2.2-t2v-a14b", {"wan_expert": "both"})]


def _real_batch(kit, family, comps, step=None):
    pixels = kit.clips()
    batch = {**family.encoders.encode_images(comps, pixels), **family.encoders.encode_prompts(comps, PROMPTS)}
    if step is not None:
        batch["step"] = step
    return batch


@pytest.mark.parametrize("variant,options", SETUPS, ids=[s[0] for s in SETUPS])
def test_the_same_generator_state_gives_the_same_loss(wan_load, wan_kit, variant, options):
    family, cfg, comps = wan_load(variant, **options)
    for step in (1, 2) if "wan_expert" in options else (None,):
        batch = _real_batch(wan_kit, family, comps, step)
        losses = [
            family.loss.compute_loss(comps, comps.model, batch, torch.Generator().manual_seed(21), cfg)
            for _ in range(2)
        ]
        other = family.loss.compute_loss(comps, comps.model, batch, torch.Generator().manual_seed(22), cfg)
        assert torch.isfinite(losses[0]) and torch.equal(losses[0], losses[1])
        assert not torch.equal(losses[0], other)


@pytest.mark.parametrize("variant,options", SETUPS, ids=[s[0] for s in SETUPS])
def test_compute_loss_makes_no_host_sync(wan_load, wan_kit, variant, options):
    """The training step's audit (``DIT_LORA_SYNC_DEBUG``) around the loss: no value read, no host copy."""
    from dit_lora.training.sync_audit import SyncAudit

    family, cfg, comps = wan_load(variant, **options)
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    for step in (1, 2) if "wan_expert" in options else (None,):
        batch = _real_batch(wan_kit, family, comps, step)
        with audit.step():
            loss = family.loss.compute_loss(comps, comps.model, batch, torch.Generator().manual_seed(0), cfg)
            loss.backward() if loss.requires_grad else None
    assert audit.steps >= 1 and not audit.passed


def test_the_audit_would_see_a_host_read_in_the_loss(wan_load, wan_kit, monkeypatch):
    """The test above can fail: a ``.item()`` slipped into the loss is refused."""
    from dit_lora.training.sync_audit import HostSyncError, SyncAudit

    family, cfg, comps = wan_load("2.1-t2v")
    batch = _real_batch(wan_kit, family, comps)
    draw = type(family.loss).draw_timesteps

    def reading(self, *args):
        out = draw(self, *args)
        float(out[2][0].item())
        return out

    monkeypatch.setattr(type(family.loss), "draw_timesteps", reading)
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    with pytest.raises(HostSyncError), audit.step():
        family.loss.compute_loss(comps, comps.model, batch, torch.Generator().manual_seed(0), cfg)


# ---- buckets ---------------------------------------------------------------------------------------------------
