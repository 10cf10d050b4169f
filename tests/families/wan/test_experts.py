"""families/wan/experts.py: which expert a step trains, the timesteps each owns, and where the idle expert's frozen
weights wait (the CPU) while the LoRA weights stay put.

The split follows diffusers' pipelines (``WanPipeline.__call__``, diffusers 0.42.1: ``transformer`` for ``t >=
boundary_ratio * num_train_timesteps``, ``transformer_2`` below). Residency is checked on the CPU (where offloading
is a no-op), with the meta device standing in for an accelerator (its tensors hold no values, so the frozen weights
start on the CPU and only the active expert's go to "the device"), and on CUDA (``@pytest.mark.gpu``).
"""

from __future__ import annotations

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
    from dit_lora.modeling.flow_matching import training_scheduler

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
    from dit_lora.modeling.trainables import add_lora

    family, cfg, comps = wan_load("2.2-t2v-a14b", wan_expert="both")
    model = comps.model
    assert isinstance(model, WanExperts) and model.offload  # --offload_inactive_expert defaults on
    add_lora(model, rank=2, alpha=2, dropout=0.0, targets=family.info.default_lora_layers, seed=0)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any(n.startswith("high.") for n in names) and any(n.startswith("low.") for n in names)
    assert model.activate("low") is model.low and model.activate("high") is model.high
    assert model.residency() == {"high": "cpu", "low": "cpu"} and model.config is model.high.config


META = torch.device("meta")  # the stand-in accelerator: its tensors hold no values, so moves onto it are free


def _fresh(offload: bool = True, lora_device: str = "cpu"):
    """Two small experts and their original frozen values (``{expert: {name: tensor}}``)."""
    high, low = _Expert(1, lora_device), _Expert(2, lora_device)
    originals = {n: {k: t.detach().clone() for k, t in _frozen(m).items()} for n, m in (("high", high), ("low", low))}
    return WanExperts(high, low, offload=offload), originals


def _assert_parked(experts: WanExperts, name: str, originals) -> None:
    """``name``'s frozen tensors are its kept CPU copies (the same storage), holding the original values."""
    kept = experts._host[name]
    for key, tensor in _frozen(experts.expert(name)).items():
        assert tensor.device.type == "cpu" and tensor.data_ptr() == kept[id(tensor)][1].data_ptr(), key
        assert torch.equal(tensor, originals[name][key.replace("base_layer.", "")]), key


def test_place_brings_high_to_the_device_and_keeps_low_in_cpu_memory():
    experts, originals = _fresh()
    experts.place(META)
    assert experts.residency() == {"high": "meta", "low": "cpu"}
    assert all(t.is_meta for t in _frozen(experts.high).values())
    _assert_parked(experts, "low", originals)
    for name in ("high", "low"):  # a CPU copy of every frozen tensor of both experts, made now (values: originals)
        kept = {id(t): t for t in _frozen(experts.expert(name)).values()}
        assert kept.keys() == experts._host[name].keys()
        assert all(h.device.type == "cpu" and not h.is_pinned() for _, h in experts._host[name].values())
    assert sorted(torch.cat([h.flatten() for _, h in experts._host["high"].values()]).tolist()) == sorted(
        torch.cat([t.flatten() for t in originals["high"].values()]).tolist())
    assert all(p.device.type == "cpu" for p in experts.parameters() if p.requires_grad)  # LoRA: not place's business


def test_to_moves_the_lora_weights_and_the_active_expert_but_never_the_parked_one():
    experts, originals = _fresh()
    experts.place(META)
    loras = [p for p in experts.parameters() if p.requires_grad]
    assert len(loras) == 2 and {p.device.type for p in loras} == {"cpu"}  # as PEFT creates them on a parked expert
    assert experts.to(META) is experts
    loras = [p for p in experts.parameters() if p.requires_grad]  # new objects: meta cannot share a CPU tensor's type
    assert len(loras) == 2 and all(p.is_meta for p in loras) and experts.residency() == {"high": "meta", "low": "cpu"}
    _assert_parked(experts, "low", originals)  # full size again, the same CPU copies: never moved, never emptied
    experts.to(META)  # again (accelerate may place twice): no change
    _assert_parked(experts, "low", originals)
    experts.activate("low")  # the buffers _apply replaced by new tensor objects still find their CPU copies
    assert experts.residency() == {"high": "cpu", "low": "meta"}
    _assert_parked(experts, "high", originals)


def test_activate_swaps_the_experts_and_the_values_round_trip(monkeypatch):
    experts, originals = _fresh(lora_device="meta")
    experts.place(META)
    loras = {id(p) for p in experts.parameters() if p.requires_grad}
    copies: list[str] = []
    bring = WanExperts._bring
    monkeypatch.setattr(WanExperts, "_bring", lambda self, name: (copies.append(name), bring(self, name)))
    previous = "high"
    for name in ("high", "low", "low", "high", "low", "high"):
        copies.clear()
        assert experts.activate(name) is experts.expert(name)
        assert copies == ([] if name == previous else [name])  # a repeat copies nothing
        idle = "low" if name == "high" else "high"
        assert experts.residency() == {name: "meta", idle: "cpu"}
        _assert_parked(experts, idle, originals)
        assert {id(p) for p in experts.parameters() if p.requires_grad} == loras
        assert all(p.is_meta for p in experts.parameters() if p.requires_grad)  # LoRA weights never move
        previous = name


def test_a_dtype_cast_reaches_the_parked_expert_through_its_cpu_copies():
    experts, originals = _fresh()
    experts.place(META)
    experts.to(torch.float64)
    assert {t.dtype for t in _frozen(experts.low).values()} == {torch.float64} and experts.high.base.weight.is_meta
    assert experts.high.base.weight.dtype == torch.float64
    experts.activate("low")
    assert {t.dtype for t in _frozen(experts.high).values()} == {torch.float64}  # not brought back as fp32
    _assert_parked(experts, "high", originals)


def test_without_offload_place_moves_both_experts_and_activate_nothing():
    experts, _ = _fresh(offload=False)
    experts.place(META)
    assert experts.residency() == {"high": "meta", "low": "meta"}
    for name in ("high", "low", "high"):
        assert experts.activate(name) is experts.expert(name)
    assert experts._host == {} and experts.residency() == {"high": "meta", "low": "meta"}


def test_a_model_never_placed_is_placed_at_its_first_switch_on_its_lora_device():
    experts, originals = _fresh(lora_device="meta")  # built by hand, LoRA already on "the accelerator"
    experts.activate("low")
    assert experts.residency() == {"high": "cpu", "low": "meta"}
    _assert_parked(experts, "high", originals)


def test_the_cpu_copies_survive_lora_injection_on_the_loaded_a14b(wan_model):
    """The family's own ``both`` model loaded for an accelerator (meta): PEFT moves every targeted weight under
    ``base_layer`` (new names, the same Parameters), and the CPU copies, kept by tensor, still cover them all."""
    from diffusers import WanTransformer3DModel

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family
    from dit_lora.modeling.trainables import add_lora

    path = wan_model("2.2-t2v-a14b")
    family = get_family("wan")
    cfg = TrainConfig.for_family("wan", pretrained_model_name_or_path=str(path), train_data_dir="clips",
                                 mixed_precision="no")
    model = family.model.load_components(cfg, META).model
    assert model.residency() == {"high": "meta", "low": "cpu"}
    originals = {n: _frozen(WanTransformer3DModel.from_pretrained(path, subfolder=s).requires_grad_(False))
                 for n, s in (("high", "transformer"), ("low", "transformer_2"))}
    add_lora(model, rank=2, alpha=2, dropout=0.0, targets=family.info.default_lora_layers, seed=0)
    names = [k for k, p in model.low.named_parameters() if not p.requires_grad]
    assert any(".base_layer." in k for k in names)
    for name in ("high", "low"):
        assert {id(t) for t in _frozen(model.expert(name)).values()} == set(model._host[name])
    model.to(META)  # accelerate's placement
    assert all(p.is_meta for p in model.parameters() if p.requires_grad)
    for name in ("low", "high"):
        model.activate(name)
        idle = "low" if name == "high" else "high"
        assert model.residency() == {name: "meta", idle: "cpu"}
        _assert_parked(model, idle, originals)


def _load_on_cuda(wan_model, offload: bool):
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family
    from dit_lora.modeling.trainables import add_lora

    family = get_family("wan")
    cfg = TrainConfig.for_family("wan", pretrained_model_name_or_path=str(wan_model("2.2-t2v-a14b")),
                                 train_data_dir="clips", mixed_precision="no", offload_inactive_expert=offload)
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    comps = family.model.load_components(cfg, torch.device("cuda"))
    load_peak = torch.cuda.max_memory_allocated() - start
    model = comps.model
    add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_q", "to_k", "to_v", "to_out.0"), seed=0)
    return comps, model.to("cuda"), load_peak  # .to: accelerate's placement in accelerator.prepare


def _nbytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in _frozen(module).values())


@pytest.mark.gpu
def test_on_cuda_offloaded_training_matches_both_experts_resident(wan_model):
    """The real path end to end: loaded by the family for CUDA, placed by ``.to("cuda")``, four alternating steps.
    The device never holds both experts' frozen weights (at load, at placement, at each switch), the parked one's
    are pinned CPU copies, LoRA parameters never move, frozen values survive the round trips, and the trained LoRA
    weights and outputs equal those of a run with both experts resident."""
    device = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, 16, 3, 8, 8, generator=g).to(device)
    text = torch.randn(1, 512, 32, generator=g).to(device)
    outputs = {}
    for key, offload in (("resident", False), ("offloaded", True)):  # resident first: the reference values
        comps, model, load_peak = _load_on_cuda(wan_model, offload)
        high, low = _nbytes(model.high), _nbytes(model.low)
        slack = 512 * (len(_frozen(model.high)) + len(_frozen(model.low)))  # the allocator's 512-byte rounding
        assert low > slack  # else "both experts resident" could not be told from one
        originals = {n: {k: t.detach().cpu().clone() for k, t in _frozen(model.expert(n)).items()}
                     for n in ("high", "low")} if not offload else None
        if offload:
            encoders = sum(_nbytes(m) for m in comps.encoders.values() if isinstance(m, nn.Module))
            assert load_peak < encoders + high + low  # low's weights never reached the device
            assert model.residency() == {"high": "cuda", "low": "cpu"}
        loras = {n: p for n, p in model.named_parameters() if p.requires_grad}
        pointers = {n: p.data_ptr() for n, p in loras.items()}
        opt = torch.optim.AdamW(loras.values(), lr=1e-2)
        outs = []
        for step in range(1, 5):
            name = expert_for_step(step)
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            expert = model.activate(name)
            if offload:  # the idle expert is dropped before the other comes in: never both on the device
                assert torch.cuda.max_memory_allocated() - before <= max(high, low) - min(high, low) + slack
                idle = "low" if name == "high" else "high"
                assert model.residency() == {name: "cuda", idle: "cpu"}
                assert all(t.is_pinned() for t in _frozen(model.expert(idle)).values())
            t = torch.full((1,), 950.0 if name == "high" else 300.0, device=device)
            out = expert(hidden_states=hidden, timestep=t, encoder_hidden_states=text, return_dict=False)[0]
            out.float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            outs.append(out.detach())
            assert all(p.device.type == "cuda" for p in loras.values())
            assert {n: p.data_ptr() for n, p in loras.items()} == pointers  # LoRA weights never moved
        torch.cuda.synchronize()
        if offload:  # both round trips done: every frozen value is the one loaded
            for name in ("high", "low"):
                model.activate(name)
                for k, t in _frozen(model.expert(name)).items():
                    assert torch.equal(t.cpu(), outputs["reference"][name][k]), k
        else:
            outputs["reference"] = originals
        outputs[key] = (outs, {n: p.detach().cpu() for n, p in loras.items()})
        del comps, model, opt
    # Same weights, same kernels: equal up to the GPU's run-to-run reduction order (attention backward).
    for a, b in zip(outputs["offloaded"][0], outputs["resident"][0]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert outputs["offloaded"][1].keys() == outputs["resident"][1].keys()
    for n, p in outputs["offloaded"][1].items():
        torch.testing.assert_close(p, outputs["resident"][1][n], rtol=1e-4, atol=1e-5)


def test_both_experts_pass_the_precision_audit(wan_load):
    """WanExperts carries the experts' _keep_in_fp32_modules: a `both` run's audit reports nothing (it listed 16
    fp32 modules of each expert as mismatches)."""
    from dit_lora.training.precision import audit_precision

    family, cfg, comps = wan_load("2.2-t2v-a14b", wan_expert="both", mixed_precision="bf16")
    mismatches = audit_precision(comps, family.precision.expected_dtypes(comps, cfg.weight_dtype), allow_fp16=False)
    assert [m for m in mismatches if m["component"] == "model"] == []
