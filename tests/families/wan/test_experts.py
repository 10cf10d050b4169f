"""families/wan/experts.py: which expert a step trains, the timesteps each owns, and where the idle expert's frozen
weights wait (the CPU) while the LoRA weights stay put.

The split follows diffusers' pipelines (``WanPipeline.__call__``, diffusers 0.42.1: ``transformer`` for ``t >=
boundary_ratio * num_train_timesteps``, ``transformer_2`` below). Residency is checked on the CPU (where offloading
is a no-op), with the meta device standing in for an accelerator (its tensors hold no values, so the frozen weights
start on the CPU and only the active expert's go to "the device"), and on CUDA (``@pytest.mark.gpu``).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dit_lora.families.wan.experts import WanExperts, expert_for_step, expert_index_ranges


def test_odd_steps_train_the_high_noise_expert_and_even_steps_the_low_one():
    assert [expert_for_step(s) for s in range(1, 7)] == ["high", "low"] * 3
    assert expert_for_step(None) == "high"  # no step number (the planner, a lone loss call): the first expert
    assert expert_for_step(torch.tensor(4)) == "low" and expert_for_step(9) == "high"


def test_index_ranges_split_where_the_timesteps_cross_the_boundary():
    table = torch.tensor([1000.0, 950.0, 875.0, 874.99, 500.0, 1.0])  # noisiest first, as the training table
    assert expert_index_ranges(table, 0.875, 1000) == {"high": (0, 3), "low": (3, 6)}  # t == boundary: high
    assert expert_index_ranges(table, 0.5, 1000) == {"high": (0, 5), "low": (5, 6)}


@pytest.mark.parametrize("shift,boundary", [(3.0, 0.875), (3.0, 0.9), (5.0, 0.875), (1.0, 0.5)])
def test_index_ranges_on_the_shifted_training_table(shift, boundary):
    from dit_lora.diffusion.flow_matching import training_scheduler

    timesteps = training_scheduler({"flow_shift": shift, "num_train_timesteps": 1000}).timesteps
    ranges = expert_index_ranges(timesteps, boundary, 1000)
    (h0, h1), (l0, l1) = ranges["high"], ranges["low"]
    assert h0 == 0 and h1 == l0 and l1 == len(timesteps) == 1000
    assert bool((timesteps[h0:h1] >= boundary * 1000).all()) and bool((timesteps[l0:l1] < boundary * 1000).all())


@pytest.mark.parametrize("boundary", [0.0, 1.5])
def test_a_boundary_leaving_an_expert_without_timesteps_is_refused(boundary):
    with pytest.raises(ValueError, match="leaves an expert without timesteps"):
        expert_index_ranges(torch.linspace(1000, 1, 1000), boundary, 1000)


class _Expert(nn.Module):
    """A frozen linear layer and buffer, plus one trainable (LoRA-like) parameter on ``lora_device``."""

    def __init__(self, seed: int, lora_device: str = "cpu"):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.base = nn.Linear(4, 4)
        with torch.no_grad():
            self.base.weight.copy_(torch.randn(4, 4, generator=g))
        self.base.requires_grad_(False)
        self.register_buffer("scale", torch.randn(4, generator=g))
        self.lora = nn.Parameter(torch.zeros(4, device=lora_device))
        self.config = {"patch_size": (1, 2, 2)}


def _frozen(expert: nn.Module) -> dict[str, torch.Tensor]:
    return {**{k: p for k, p in expert.named_parameters() if not p.requires_grad}, **dict(expert.named_buffers())}


def test_on_the_cpu_activate_returns_the_expert_and_moves_nothing():
    high, low = _Expert(1), _Expert(2)
    experts = WanExperts(high, low, offload=True)
    pointers = {n: t.data_ptr() for n, t in experts.state_dict(keep_vars=True).items()}
    for name, module in (("high", high), ("low", low), ("low", low), ("high", high)):
        assert experts.activate(name) is module and experts.expert(name) is module
        assert experts.residency() == {"high": "cpu", "low": "cpu"}
        assert {n: t.data_ptr() for n, t in experts.state_dict(keep_vars=True).items()} == pointers
    assert experts._host == {}  # no CPU copies are kept when the device is the CPU


def test_loaded_a14b_experts_with_lora_switch_on_the_cpu(wan_load):
    """The family's own ``both`` model (``make_peft_capable(WanExperts(...))``) with LoRA attached as the run does."""
    from dit_lora.training.trainables import add_lora

    family, cfg, comps = wan_load("2.2-t2v-a14b", wan_expert="both")
    model = comps.model
    assert isinstance(model, WanExperts) and model.offload  # --offload_inactive_expert defaults on
    add_lora(model, rank=2, alpha=2, dropout=0.0, targets=family.default_lora_layers, seed=0)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any(n.startswith("high.") for n in names) and any(n.startswith("low.") for n in names)
    assert model.activate("low") is model.low and model.activate("high") is model.high
    assert model.residency() == {"high": "cpu", "low": "cpu"} and model.config is model.high.config


def _meta_experts(offload: bool = True):
    """Experts whose LoRA parameters live on the meta device (the stand-in accelerator): WanExperts takes the
    trainable parameters' device as the accelerator's, exactly as on CUDA."""
    high, low = _Expert(1, "meta"), _Expert(2, "meta")
    originals = {name: {k: t.detach().clone() for k, t in _frozen(m).items()} for name, m in (("high", high),
                                                                                               ("low", low))}
    return WanExperts(high, low, offload=offload), originals


def test_place_points_the_frozen_tensors_at_the_given_ones_and_leaves_lora_alone():
    experts = WanExperts(_Expert(1), _Expert(2), offload=True)
    lora, module = experts.high.lora, experts.high
    params = {k: id(p) for k, p in module.named_parameters()}
    given = {"base.weight": torch.full((4, 4), 2.0), "base.bias": torch.full((4,), 3.0), "buffer:scale": torch.ones(4)}
    experts._place("high", given)
    assert module.base.weight.data_ptr() == given["base.weight"].data_ptr()
    assert module.scale.data_ptr() == given["buffer:scale"].data_ptr()
    assert {k: id(p) for k, p in module.named_parameters()} == params  # the same Parameter objects (optimizer state)
    assert experts.high.lora is lora and not lora.any() and not torch.equal(experts.low.base.weight, given["base.weight"])


def test_with_an_accelerator_the_idle_expert_waits_in_cpu_copies_and_lora_never_moves(monkeypatch):
    """The meta device holds no values, so a placement onto it is recorded rather than made; placements of CPU
    copies are made for real (``_place``, tested above)."""
    experts, originals = _meta_experts()
    loras = {p: id(p) for p in experts.parameters() if p.requires_grad}
    assert len(loras) == 2 and all(p.device.type == "meta" for p in loras)
    placed: list[tuple[str, str, bool]] = []
    place = WanExperts._place

    def recording(self, name, tensors):
        devices = {t.device.type for t in tensors.values()}
        assert len(devices) == 1 and set(tensors) == {"base.weight", "base.bias", "buffer:scale"}  # frozen only
        placed.append((name, devices.pop(), tensors is self._host.get(name)))
        if placed[-1][1] == "cpu":
            place(self, name, tensors)

    monkeypatch.setattr(WanExperts, "_place", recording)
    expected = {"high": [("low", "cpu", True), ("high", "meta", False)],
                "low": [("high", "cpu", True), ("low", "meta", False)]}
    previous = None
    for name in ("high", "high", "low", "high", "low", "low"):
        placed.clear()
        assert experts.activate(name) is experts.expert(name)
        assert placed == ([] if name == previous else expected[name])  # a repeat moves nothing
        previous = name
        idle = "low" if name == "high" else "high"
        host = experts._host[idle]
        assert all(t.device.type == "cpu" for t in host.values())
        for key, tensor in _frozen(experts.expert(idle)).items():
            kept = host[key if key != "scale" else "buffer:scale"]
            assert tensor.data_ptr() == kept.data_ptr()  # the idle expert's tensors are the kept CPU copies
            assert torch.equal(tensor, originals[idle][key])  # holding the original values
        assert {p: id(p) for p in experts.parameters() if p.requires_grad} == loras
        assert all(p.device.type == "meta" for p in loras)  # LoRA weights never move


def test_without_offload_both_experts_stay_on_the_accelerator():
    experts, _ = _meta_experts(offload=False)
    before = experts.residency()
    for name in ("high", "low", "high"):
        assert experts.activate(name) is experts.expert(name)
    assert experts._host == {} and experts.residency() == before


def _tiny_a14b_on(device: torch.device, offload: bool, pair):
    from dit_lora.families.diffusion import make_peft_capable
    from dit_lora.training.trainables import add_lora

    high, low = (copy.deepcopy(m).requires_grad_(False) for m in pair)  # frozen before LoRA, as make_components
    model = make_peft_capable(WanExperts(high, low, offload=offload))
    add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"), seed=0)
    return model.to(device)


@pytest.mark.gpu
def test_on_cuda_offloaded_training_matches_both_experts_resident():
    """Real device moves: the idle expert's frozen weights are pinned CPU copies, the active one's are on the GPU,
    LoRA parameters never move, frozen values survive the round trips, and four alternating training steps give
    the same LoRA weights and outputs as with both experts resident."""
    from dit_lora.families.wan.demo import build_tiny_wan_components

    device = torch.device("cuda")
    comps = build_tiny_wan_components("2.2-t2v-a14b", layers=2)
    pair = (comps["transformer"], comps["transformer_2"])
    originals = {n: {k: t.detach().clone() for k, t in [*m.named_parameters(), *m.named_buffers()]}
                 for n, m in zip(("high", "low"), pair)}
    offloaded, resident = _tiny_a14b_on(device, True, pair), _tiny_a14b_on(device, False, pair)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, 16, 3, 8, 8, generator=g).to(device)
    text = torch.randn(1, 512, 32, generator=g).to(device)
    outputs = {}
    for key, model in (("offloaded", offloaded), ("resident", resident)):
        loras = {n: p for n, p in model.named_parameters() if p.requires_grad}
        pointers = {n: p.data_ptr() for n, p in loras.items()}
        opt = torch.optim.AdamW(loras.values(), lr=1e-2)
        outs = []
        for step in range(1, 5):
            name = expert_for_step(step)
            expert = model.activate(name)
            t = torch.full((1,), 950.0 if name == "high" else 300.0, device=device)
            out = expert(hidden_states=hidden, timestep=t, encoder_hidden_states=text, return_dict=False)[0]
            out.float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            outs.append(out.detach())
            if key == "offloaded":
                idle = "low" if name == "high" else "high"
                assert model.residency() == {name: "cuda", idle: "cpu"}
                assert all(t.is_pinned() for t in _frozen(model.expert(idle)).values())
            assert all(p.device.type == "cuda" for p in loras.values())
            assert {n: p.data_ptr() for n, p in loras.items()} == pointers  # LoRA weights never moved
        torch.cuda.synchronize()
        for name in ("high", "low"):
            model.activate(name)  # both round trips done: every frozen value is the original
            module = model.expert(name)
            for k, t in _frozen(module).items():
                base = k.replace("base_layer.", "")
                assert torch.equal(t.cpu(), originals[name][base]), k
        outputs[key] = (outs, {n: p.detach().cpu() for n, p in loras.items()})
    # Same weights, same kernels: equal up to the GPU's run-to-run reduction order (attention backward).
    for a, b in zip(outputs["offloaded"][0], outputs["resident"][0]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert outputs["offloaded"][1].keys() == outputs["resident"][1].keys()
    for n, p in outputs["offloaded"][1].items():
        torch.testing.assert_close(p, outputs["resident"][1][n], rtol=1e-4, atol=1e-5)
