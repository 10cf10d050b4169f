"""Ideogram 4's loss against Ideogram4Pipeline's own code: the packed sequence's ids are ``_prepare_ids``', the
step's prediction is the pipeline's conditional pass (at the pipeline's own padding), sigma is drawn at the
resolution-aware mean, the transformer gets ``1 - sigma`` and the target is ``x0 - eps``."""

from __future__ import annotations

import pytest
import torch


def test_the_layout_is_the_pipelines():
    from diffusers import Ideogram4Pipeline

    from dit_lora.families.ideogram4.loss import layout_ids

    ours = layout_ids([3, 5], 2, 3, 7, "cpu")
    theirs = Ideogram4Pipeline._prepare_ids([3, 5], 2, 3, 7, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("mean", [0.0, 0.7])
def test_the_resolution_aware_mean_is_the_pipelines(mean):
    from diffusers.pipelines.ideogram4.pipeline_ideogram4 import _resolution_aware_mu

    from dit_lora.families.ideogram4.loss import resolution_mean

    assert resolution_mean(mean, 1024, 768) == pytest.approx(_resolution_aware_mu(1024, 768, mean))


def test_the_steps_prediction_is_the_pipelines_conditional_pass(parts):
    """Two captions of different lengths, padded to the batch's longest (not the pipeline's 40 here, 2048 by
    default): the image tokens' prediction equals the pipeline's own call on its own layout."""
    from diffusers import Ideogram4Pipeline

    from dit_lora.contract.family import Components
    from dit_lora.families.ideogram4.encoders import Ideogram4Encoders
    from dit_lora.families.ideogram4.loss import predict

    model = parts["transformer"]
    captions = ["a red circle", "a small blue square on a green background"]
    comps = Components(model=None, encoders={k: parts[k] for k in ("vae", "tokenizer", "text_encoder")})
    batch = Ideogram4Encoders().encode_prompts(comps, captions)
    batch["caption_lengths"] = batch["prompt_embeds_lengths"].tolist()
    noisy = torch.randn(2, 16, 2, 3, generator=torch.Generator().manual_seed(0))
    sigmas = torch.tensor([0.3, 0.8])
    with torch.no_grad():
        ours = predict(model, noisy, sigmas, batch, torch.float32)
        pipe = Ideogram4Pipeline(scheduler=None, vae=None, transformer=None, unconditional_transformer=None,
                                 tokenizer=parts["tokenizer"], text_encoder=parts["text_encoder"])  # fmt: skip
        features, position_ids, segment_ids, indicator = pipe.encode_prompt(captions, 2, 3, 40, "cpu")
        tokens = noisy.flatten(2).transpose(1, 2)
        out = model(hidden_states=torch.cat([torch.zeros(2, 40, 16), tokens], 1), timestep=1.0 - sigmas,
                    encoder_hidden_states=features, position_ids=position_ids, segment_ids=segment_ids,
                    indicator=indicator, return_dict=False)[0]  # fmt: skip
    theirs = out[:, 40:].transpose(1, 2).reshape(noisy.shape)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


class Probe(torch.nn.Module):
    """A transformer that predicts zeros and records its timestep and input length."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: dict = {}

    def forward(self, hidden_states, timestep, encoder_hidden_states, **kwargs):
        self.seen.update(timestep=timestep, length=hidden_states.shape[1], dtype=hidden_states.dtype)
        return (hidden_states * self.weight,)


def test_sigma_time_and_target_are_diffusers_scripts():
    from diffusers.training_utils import compute_density_for_timestep_sampling

    from dit_lora.config import TrainConfig
    from dit_lora.contract.family import Components
    from dit_lora.families.ideogram4.loss import Ideogram4Loss, resolution_mean

    cfg = TrainConfig.for_family("ideogram4", mixed_precision="no", logit_std=1.5, logit_mean=0.2)
    latents = torch.randn(3, 16, 4, 2, generator=torch.Generator().manual_seed(1))
    batch = {"latents": latents, "prompt_embeds": torch.zeros(3, 5, 8), "caption_lengths": [5, 2, 4]}
    probe = Probe()
    loss = Ideogram4Loss(None).compute_loss(
        Components(model=probe), probe, batch, torch.Generator().manual_seed(7), cfg
    )
    gen = torch.Generator().manual_seed(7)
    noise = torch.randn(latents.shape, generator=gen)
    mean = resolution_mean(0.2, 64, 32)  # the latent grid's pixels: 16 per cell
    sigmas = compute_density_for_timestep_sampling("logit_normal", 3, logit_mean=mean, logit_std=1.5, generator=gen)
    torch.testing.assert_close(probe.seen["timestep"], 1.0 - sigmas)
    assert probe.seen["length"] == 5 + 4 * 2 and probe.seen["dtype"] == torch.float32
    torch.testing.assert_close(loss, ((latents - noise) ** 2).mean())  # a zero prediction against x0 - eps
