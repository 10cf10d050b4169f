"""output/adapter.py fold_lora_scale for every adapter type: the folded file (alpha = r) applied by PEFT at strength
1 gives the update of the unfolded one at alpha / r, the factor that carries the scale is the only tensor changed
(DoRA's magnitude vector never), and per-layer rank/alpha patterns fold as PEFT scales them."""

from __future__ import annotations

import copy

import pytest
import torch

from dit_lora.output.adapter import fold_lora_scale, lora_scale


class _Net(torch.nn.Module):
    """A Linear and a Conv2d: every type's Linear and Conv weights (LoKr's kron reshapes, LoHa's conv factors)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 32)
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x, img):
        return self.fc(x).sum() + self.conv(img).sum(), self.fc(x), self.conv(img)


def _configs():
    from peft import LoHaConfig, LoKrConfig, LoraConfig

    targets = ["fc", "conv"]
    return {
        "dora": LoraConfig(r=4, lora_alpha=6, use_dora=True, target_modules=targets),
        "dora_patterns": LoraConfig(r=4, lora_alpha=6, use_dora=True, rank_pattern={"conv": 2},
                                    alpha_pattern={"fc": 3}, target_modules=targets),
        "lokr": LoKrConfig(r=4, alpha=6, target_modules=targets),
        "lokr_decomposed": LoKrConfig(r=1, alpha=3, decompose_both=True, decompose_factor=4, target_modules=targets),
        "lokr_patterns": LoKrConfig(r=4, alpha=6, rank_pattern={"conv": 2}, alpha_pattern={"fc": 5},
                                    target_modules=targets),
        "loha": LoHaConfig(r=4, alpha=6, target_modules=targets),
        "loha_cp": LoHaConfig(r=2, alpha=5, use_effective_conv2d=True, target_modules=targets),
    }


def _load(config_cls, config: dict, state: dict, base):
    """The folded adapter loaded by PEFT's own code, every tensor landing (none missing or unexpected)."""
    import inspect

    from peft import inject_adapter_in_model
    from peft.utils import set_peft_model_state_dict

    params = inspect.signature(config_cls).parameters
    model = inject_adapter_in_model(config_cls(**{k: v for k, v in config.items() if k in params}),
                                    copy.deepcopy(base))
    result = set_peft_model_state_dict(model, state)
    assert not result.unexpected_keys
    assert not [k for k in result.missing_keys if ".default" in k]
    return model


@pytest.mark.parametrize("name", list(_configs()))
def test_folded_adapter_applies_the_trained_update_at_strength_one(name):
    from peft import inject_adapter_in_model
    from peft.utils import get_peft_model_state_dict

    torch.manual_seed(0)
    config = _configs()[name]
    base = _Net()
    model = inject_adapter_in_model(copy.deepcopy(config), copy.deepcopy(base))
    model.peft_config = {"default": config}
    with torch.no_grad():  # stand-in for training: every adapter tensor non-zero
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape) * 0.3 + (1.0 if "magnitude" in n else 0.0))
    x, img = torch.randn(3, 16), torch.randn(2, 4, 6, 6)
    with torch.no_grad():
        want = model(x, img)
    state = dict(get_peft_model_state_dict(model))
    before = {k: v.clone() for k, v in state.items()}
    folded, folded_config = fold_lora_scale(state, config.to_dict())
    assert all(torch.equal(state[k], before[k]) for k in state)  # inputs untouched
    changed = {k for k in state if not torch.equal(folded[k], state[k])}
    scaled = {"dora": "lora_B", "lokr": "lokr_w1", "loha": "hada_w1_a"}[name.split("_")[0]]
    # exactly one factor per layer carries the scale (lokr_w1 or, decomposed, lokr_w1_a); DoRA's magnitude never
    assert {k.split(".", 1)[0] for k in changed} == {"fc", "conv"}
    assert all(f".{scaled}" in k and "_b" not in k.rsplit(".", 1)[-1] for k in changed), changed
    assert not [k for k in changed if "magnitude" in k]
    for key in changed:
        module = key.split(".", 1)[0]
        torch.testing.assert_close(folded[key], state[key] * lora_scale(config.to_dict(), module))
    assert folded_config["r"] == folded_config["lora_alpha" if name.startswith("dora") else "alpha"]
    fresh = _load(type(config), folded_config, folded, base)
    assert all(s == 1.0 for m in fresh.modules() if hasattr(m, "scaling") for s in m.scaling.values())
    with torch.no_grad():
        got = fresh(x, img)
    for g, w in zip(got[1:], want[1:]):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6 * w.abs().max().item())
    # and it is the update, not a no-op: the base alone is far from it
    with torch.no_grad():
        assert (base(x, img)[1] - want[1]).abs().max() > 0.01


def test_fold_refuses_an_adapter_type_it_does_not_know():
    from dit_lora.core.errors import UserError

    with pytest.raises(UserError, match="OFT"):
        fold_lora_scale({}, {"peft_type": "OFT", "r": 1})
