"""The kit's guided flow: a family that states its options, its tokens and its call gets the loss written out by hand
(the fixed shift option wins over the scheduler's line, the guidance option reaches a model with the embedding and
nothing reaches one without), and its state records what the loaded checkpoint is."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from diffusers.training_utils import compute_density_for_timestep_sampling

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionLoss, DiffusionPlan
from dit_lora.kit.guided_flow import GuidedFlowLoss, GuidedFlowPlan, GuidedFlowRun
from dit_lora.kit.loader import BlockMix


@dataclass(frozen=True)
class Options:
    weighting_scheme: str = "none"
    logit_mean: float = 0.0
    logit_std: float = 1.0
    mode_scale: float = 1.29
    toy_shift: float | None = None
    toy_guidance: float = 2.0


class Cfg:
    def __init__(self, **values):
        self.family_options = Options(**values)
        self.data = None  # the loss hands it to weighted_or_masked_mse only, which the test replaces


class ToyLoss(GuidedFlowLoss, DiffusionLoss):
    shift_option, guidance_option = "toy_shift", "toy_guidance"

    def image_tokens(self, latents):
        return latents.shape[-2] * latents.shape[-1]

    def predict(self, model, noisy, sigmas, guidance, batch):
        return model(noisy, sigmas, guidance)


def test_the_loss_is_written_out_by_hand(monkeypatch):
    import dit_lora.kit.guided_flow as kit

    monkeypatch.setattr(kit, "weighted_or_masked_mse", lambda pred, target, w, batch, data: ((pred - target) ** 2).mean())
    latents, seen = torch.randn(2, 3, 4, 4), {}

    def model(noisy, sigmas, guidance):
        seen.update(noisy=noisy, sigmas=sigmas, guidance=guidance)
        return noisy * 0.5

    state = GuidedFlowRun(scheduler_config={"use_dynamic_shifting": False, "shift": 5.0})
    loss = ToyLoss(None).compute_loss(Components(model=None, state=state), model, {"latents": latents},
                                      torch.Generator().manual_seed(1), Cfg(toy_shift=2.0))
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(latents.shape, generator=g)
    u = compute_density_for_timestep_sampling("none", 2, logit_mean=0.0, logit_std=1.0, mode_scale=1.29, generator=g)
    sigmas = 2.0 * u / (1 + u)  # the option's 2, not the scheduler's 5
    noisy = (1 - sigmas.view(-1, 1, 1, 1)) * latents + sigmas.view(-1, 1, 1, 1) * noise
    torch.testing.assert_close(seen["sigmas"], sigmas)
    torch.testing.assert_close(loss, ((noisy * 0.5 - (noise - latents)) ** 2).mean())
    assert torch.equal(seen["guidance"], torch.full((2,), 2.0))
    state.guidance_embeds = False
    ToyLoss(None).compute_loss(Components(model=None, state=state), model, {"latents": latents},
                               torch.Generator().manual_seed(1), Cfg())
    assert seen["guidance"] is None


def test_the_state_records_the_loaded_checkpoint():
    from types import SimpleNamespace

    from dit_lora.kit.loader import LoadedParts

    transformer = SimpleNamespace(config=SimpleNamespace(guidance_embeds=False))
    loaded = LoadedParts(transformers={"transformer": transformer}, vae=None,
                         scheduler_config={"shift": 3.0, "use_dynamic_shifting": True})
    comps = GuidedFlowRun().components(loaded)
    assert comps.state.scheduler_config["shift"] == 3.0 and comps.state.guidance_embeds is False
    assert comps.model is transformer and comps.scheduler is not None


@dataclass
class ToyRun(GuidedFlowRun):
    pass


def test_a_family_state_records_the_checkpoint_in_a_new_state_of_its_own_class():
    from types import SimpleNamespace

    from dit_lora.kit.loader import LoadedParts

    transformer = SimpleNamespace(config=SimpleNamespace(guidance_embeds=True))
    loaded = LoadedParts(transformers={"transformer": transformer}, vae=None, scheduler_config={"shift": 3.0})
    comps = ToyRun().components(loaded)
    assert type(comps.state) is ToyRun and comps.state.guidance_embeds and comps.model is transformer
    assert comps.state.text is None and not hasattr(comps.state, "flow_tables")  # the sigmas come from the density


class ToyPlan(GuidedFlowPlan, DiffusionPlan):
    units = BlockMix(defaults=(19, 38))


def test_the_plan_builds_the_model_parts_in_units_with_the_run_text_settings(monkeypatch):
    from types import SimpleNamespace

    import dit_lora.kit.guided_flow as kit
    from dit_lora.contract.capabilities import TextSettings

    seen = {}

    def plan_parts(parts, cfg, read, depth, *, at_depth):
        seen.update(parts=parts, read=read, depth=depth, at_depth=at_depth)
        return "loaded"

    class Model:
        def pipeline_parts(self, cfg):
            return "parts"

        def build_components(self, cfg, loaded, device):
            seen.update(loaded=loaded, device=device)
            transformer = SimpleNamespace(config=SimpleNamespace(joint_attention_dim=8))
            return Components(model=transformer, state=ToyRun())

    monkeypatch.setattr(kit, "plan_parts", plan_parts)
    encoders = SimpleNamespace(text_settings=lambda cfg: TextSettings(max_sequence_length=5))
    plan = ToyPlan(encoders, None)
    plan.model = Model()
    cfg = SimpleNamespace(weight_dtype=torch.bfloat16)
    comps = plan.plan_components(cfg, "read", depth=2)
    assert seen == {"parts": "parts", "read": "read", "depth": 2, "at_depth": ToyPlan.units.at_depth,
                    "loaded": "loaded", "device": None}
    assert comps.state.text == TextSettings(max_sequence_length=5)
    embeds = plan.plan_conditioning(comps, cfg, 3)["prompt_embeds"]
    assert embeds.shape == (3, 5, 8) and embeds.dtype == torch.bfloat16
    assert plan.swap_depth_keys == (("transformer/config.json", "num_layers"),
                                    ("transformer/config.json", "num_single_layers"))
