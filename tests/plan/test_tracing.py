"""plan/tracing.py: the step traced on fake tensors at two and three blocks and extrapolated to the model's depth,
both checkpointing settings from one build per depth, adapters made on the meta device, the family's plan capability."""

import dataclasses

import pytest
from plan_readers import dit_reader, stand_in_configs

from dit_lora.catalogue import defaults
from dit_lora.config import TrainConfig
from dit_lora.plan import make_plan, plan_run, tracing
from dit_lora.registry import get_family

HUB_ID = "facebook/DiT-XL-2-256"


@pytest.fixture
def narrow_dit(monkeypatch):
    """DiT-XL-2-256's published configs, two narrow blocks deep, read as ``make_plan`` reads a model folder."""
    stand_in_configs(monkeypatch, HUB_ID, {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16})


def _plan(num_layers: int, narrow: bool = False):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=2)
    return plan_run(cfg, get_family("dit"), dit_reader(num_layers, narrow), device="cuda")


@pytest.mark.slow  # traces DiT-XL's real width five blocks deep: a minute and a half on 2 cores
def test_depth_extrapolation_matches_a_full_trace(monkeypatch):
    """Traced at 1 and 2 blocks and extrapolated to 5 == traced at all 5 blocks."""
    extrapolated = _plan(5)
    monkeypatch.setattr(tracing, "traces", lambda family, cfg, read, depth, settings, **kw: _direct(family, cfg,
                                                                                                     read, depth,
                                                                                                     settings))
    direct = _plan(5)
    for a, b in zip(extrapolated.steps, direct.steps):
        assert (a.bucket, a.checkpointing) == (b.bucket, b.checkpointing)
        assert a.activation_bytes == pytest.approx(b.activation_bytes, rel=0.02)
        assert a.flops == pytest.approx(b.flops, rel=0.001)
    assert extrapolated.weights == direct.weights


def _direct(family, cfg, read, depth, settings):
    """tracing.traces without extrapolation: the full depth traced directly (no read shares: a CUDA plan counts every
    weight as resident)."""
    from dit_lora.plan.fake import LiveBytes, fake_mode, fake_module

    steps, encode = [], 0
    for gc in settings:
        comps, _ = tracing.build(family, cfg, read, depth, gc)
        with fake_mode() as mode:
            for module in [comps.model, comps.encoders["vae"]]:
                fake_module(module, mode)
            live = LiveBytes()
            with live:
                batches = family.plan.plan_batches(cfg, comps)
            encode = max(encode, live.peak)
        for bucket, batch in batches:
            mem, flops = tracing.trace_step(family, cfg, comps, batch, mode)
            steps.append(tracing.StepTrace(bucket, gc, mem, flops))
    return steps, encode, {}


def test_both_settings_are_traced_on_one_build_per_depth(narrow_dit, monkeypatch):
    """Planning both checkpointing settings builds the components once per traced depth (the trained model copied
    for the checkpointed trace), not once per depth and setting, and traces what a build per setting traces."""
    family = get_family("dit")
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    alone = [  # each setting traced on a build of its own
        make_plan(TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1,
                              gradient_checkpointing=gc), family, device="cuda", both_settings=False)
        for gc in (False, True)
    ]
    depths, real = [], tracing.planner(family).plan_components
    monkeypatch.setattr(type(tracing.planner(family)), "plan_components",
                        lambda self, cfg, read, depth=None: depths.append(depth) or real(cfg, read, depth))
    both = make_plan(cfg, family, device="cuda")
    assert depths == [None, 2]  # the full depth's weights, then one build at the model's own two blocks
    assert [(s.bucket, s.checkpointing, s.activation_bytes, s.flops) for s in both.steps] == [
        (s.bucket, s.checkpointing, s.activation_bytes, s.flops) for plan in alone for s in plan.steps]


def test_the_checkpointed_trace_gets_its_own_copy_of_what_a_step_may_cache(narrow_dit):
    """The checkpointed setting's components are copied before any trace: the trained model, the scheduler and the
    run's state are its own (CogVideoX keeps its RoPE tables in the state: shared, they were made in the first
    trace only, and 5B I2V's checkpointed step counted 8.6 MiB less than a build of its own); the encoders are
    shared."""
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    builds = tracing.builds(get_family("dit"), cfg, defaults.config_reader(cfg.model), 2, (True, False))
    assert [gc for gc, _ in builds] == [False, True]
    (_, plain), (_, checkpointed) = builds
    assert checkpointed.model.gradient_checkpointing and not plain.model.gradient_checkpointing
    assert checkpointed.scheduler is not plain.scheduler
    assert checkpointed.state is None or checkpointed.state is not plain.state
    assert plain.encoders and all(checkpointed.encoders[k] is plain.encoders[k] for k in plain.encoders)


def test_the_plan_draws_no_adapter_weights_and_a_cuda_plan_watches_no_encode_input(narrow_dit, monkeypatch):
    """PEFT initialises an adapter's matrices where it makes them: the plan has them made on the meta device, so no
    LoRA weight is drawn in host memory (the draws were a fifth of a Wan 14B plan's time), and their initialisers
    are skipped there too (a meta tensor has no values to draw: fake.meta_init_skipped), so none is drawn at all.
    Which weights the encode reads matters only on a CPU (memory-mapped weights: test_resident.py), so a CUDA plan
    does not watch every operator's inputs for it."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    watched = []

    class Watching(tracing.ReadTensors):
        def __init__(self) -> None:
            super().__init__()
            watched.append(self)

    monkeypatch.setattr(tracing, "ReadTensors", Watching)

    drawn, real = [], torch.Tensor.uniform_

    def uniform_(tensor, *args, **kwargs):
        if not isinstance(tensor, FakeTensor):  # the fake step's own draws have no storage
            drawn.append(tensor.device.type)
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "uniform_", uniform_)
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    plan = make_plan(cfg, get_family("dit"), device="cuda", both_settings=False)
    assert plan.trainable_params > 0 and drawn == [] and watched == []


def test_a_family_without_the_memory_plan_capability_is_one_paragraph():
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_family
    from dit_lora.contract.capabilities import MemoryPlan
    from dit_lora.plan.tracing import planner

    sana = get_family("sana")  # a FamilySpec: its plan component is what the planner uses
    assert planner(sana) is sana.plan
    assert MemoryPlan in sana.capabilities

    def NoPlan():  # noqa: N802 - the same family without its memory plan
        return dataclasses.replace(sana, plan=None)

    with pytest.raises(UserError, match=r"The memory plan .* needs the MemoryPlan capability, which the `sana` family "
                                        r"does not declare \(depth_key, plan_batches"):
        planner(NoPlan())
