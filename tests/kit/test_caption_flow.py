"""kit/caption_flow.py: the kit's masked-caption flow loss (its draw, cut and weighting are pinned
bitwise by Sana's hand-computed loss, tests/families/sana/test_loss.py, and in the reversed conventions by Lumina 2's)
and the reversed-time conventions against the scheduler they invert."""

from __future__ import annotations

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.caption_flow import MaskedCaptionFlowLoss, reversed_target, reversed_time
from dit_lora.kit.run_state import FlowRun
from dit_lora.modeling.flow_matching import training_scheduler


class _Run(FlowRun):
    text_tokens: int | None = None


class _Loss(MaskedCaptionFlowLoss):
    run_state, tables = staticmethod(_Run.of), staticmethod(_Run.tables)

    def predict(self, model, noisy, timesteps, embeds, mask):
        self.seen = (timesteps, embeds, mask)
        return noisy * 0 + embeds.mean()


def test_reversed_time_and_target_invert_the_schedule():
    scheduler = training_scheduler({"shift": 6.0})
    sigmas, timesteps = scheduler.sigmas[: len(scheduler.timesteps)], scheduler.timesteps
    torch.testing.assert_close(reversed_time(timesteps), 1 - sigmas, atol=1e-6, rtol=0)
    x0, eps = torch.ones(2, 3), torch.zeros(2, 3)
    assert torch.equal(reversed_target(x0, eps), x0)  # the clean latents minus the noise, not the velocity


def test_a_family_states_only_its_call_and_gets_the_velocity_target_by_default():
    from dit_lora.config import TrainConfig

    loss = _Loss(None)
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    batch = {"latents": torch.zeros(2, 4, 4, 4), "prompt_embeds": torch.ones(2, 5, 3),
             "prompt_attention_mask": torch.ones(2, 5, dtype=torch.long)}
    _Run.of(comps).text_tokens = 2
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path="m")
    value = loss.compute_loss(comps, None, batch, torch.Generator().manual_seed(0), cfg)
    timesteps, embeds, mask = loss.seen
    assert embeds.shape == (2, 2, 3) and mask.shape == (2, 2) and timesteps.dtype == torch.float32
    # pred 1 against the velocity eps - 0: the mean of (1 - eps)^2 is 1 + E[eps^2] (about 2), not a velocity of 0
    assert 1.5 < value.item() < 2.5
