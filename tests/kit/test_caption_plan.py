"""kit/caption_plan.py: a text-to-image flow family's plan states its classes, state, mask and
caption length; the plan builds the meta components with that length and empty caption tensors (with the mask)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dit_lora.contract.family import Components
from dit_lora.families.sana.plan import SanaPlan
from dit_lora.families.sana.state import SanaRun
from dit_lora.families.zimage.plan import ZImagePlan


def conditioning(plan, length: int) -> dict:
    comps = Components(model=None, encoders={"text_encoder": SimpleNamespace(config=SimpleNamespace(hidden_size=8))},
                       state=SanaRun(text=SimpleNamespace(max_sequence_length=length)))
    return plan.plan_conditioning(comps, SimpleNamespace(weight_dtype=torch.bfloat16), 2)


def test_the_caption_tensors_and_the_mask_only_where_the_family_caches_one():
    sana = conditioning(SanaPlan(None, None), 5)
    assert sana["prompt_embeds"].shape == (2, 5, 8) and sana["prompt_embeds"].dtype == torch.bfloat16
    assert sana["prompt_attention_mask"].shape == (2, 5) and bool(sana["prompt_attention_mask"].all())
    assert set(conditioning(ZImagePlan(None, None), 7)) == {"prompt_embeds"}


def test_the_components_carry_the_familys_state_with_the_runs_caption_length(monkeypatch):
    seen = {}
    monkeypatch.setattr("dit_lora.kit.caption_plan.meta_components",
                        lambda cfg, read, depth, **kw: seen.update(kw) or "components")
    cfg = SimpleNamespace(data=SimpleNamespace(max_sequence_length=77))
    assert ZImagePlan(None, None).plan_components(cfg, None, 2) == "components"
    assert seen["depth_key"] == "n_layers" and seen["transformer_class"].__name__ == "ZImageTransformer2DModel"
    assert seen["vae_class"].__name__ == "AutoencoderKL" and seen["state"].text.max_sequence_length == 77
