"""plan/__init__.py: ``make_plan`` plans a resolved config from the model's own config files (no weights)."""

import pytest
from plan_readers import stand_in_configs

from dit_lora.catalogue import by_hub_id
from dit_lora.config import TrainConfig
from dit_lora.plan import Plan, make_plan
from dit_lora.registry import get_family

HUB_ID = "facebook/DiT-XL-2-256"


@pytest.fixture
def narrow_dit(monkeypatch):
    """DiT-XL-2-256's published configs, two narrow blocks deep, read as ``make_plan`` reads a model folder."""
    asked = []
    stand_in_configs(monkeypatch, HUB_ID, {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16}, asked)
    return asked


def test_make_plan_reads_the_models_configs_and_names_its_catalogue_entry(narrow_dit):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=2)
    plan = make_plan(cfg, get_family("dit"), device="cuda", num_processes=2, entry=by_hub_id(HUB_ID),
                     both_settings=False)
    assert narrow_dit == [HUB_ID]
    assert isinstance(plan, Plan) and plan.catalogue_entry == HUB_ID and plan.family == "dit"
    assert plan.num_processes == 2 and plan.depth == 2 and plan.train_batch_size == 2
    assert [step.checkpointing for step in plan.steps] == [False]  # one setting traced
    assert plan.peak_memory_bytes > sum(plan.weights.values()) > 0


def test_without_an_entry_the_plan_is_uncatalogued_and_traces_both_settings(narrow_dit):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    plan = make_plan(cfg, get_family("dit"), device="cuda")
    assert plan.catalogue_entry is None
    assert sorted(step.checkpointing for step in plan.steps) == [False, True]


def _count_traces(monkeypatch) -> list[tuple[bool, ...]]:
    """The checkpointing settings of each step trace the plans make from here on."""
    from dit_lora.plan import tracing

    monkeypatch.setenv("DIT_LORA_PLAN_CACHE", "0")  # the start-of-run gate would reuse traces kept earlier
    settings, real = [], tracing.traces

    def traces(family, cfg, read, full_depth, wanted, **kwargs):
        settings.append(tuple(wanted))
        return real(family, cfg, read, full_depth, wanted, **kwargs)

    monkeypatch.setattr(tracing, "traces", traces)
    return settings


def test_over_capacity_the_same_plan_traces_the_other_setting_too(narrow_dit, monkeypatch):
    """The start-of-run gate: one plan, the run's own checkpointing setting traced, and the other one added only
    when the peak exceeds the device's memory (the advice weighs both); the steps as a plan of both settings
    lists them."""
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    both = make_plan(cfg, get_family("dit"), device="cuda")
    settings = _count_traces(monkeypatch)
    fits = make_plan(cfg, get_family("dit"), device="cuda", both_settings=False, capacity=1 << 50)
    assert settings == [(False,)] and [s.checkpointing for s in fits.steps] == [False]
    settings.clear()
    over = make_plan(cfg, get_family("dit"), device="cuda", both_settings=False, capacity=1)
    assert settings == [(False,), (True,)]
    assert [(s.bucket, s.checkpointing, s.activation_bytes) for s in over.steps] == [
        (s.bucket, s.checkpointing, s.activation_bytes) for s in both.steps]


def test_the_run_builds_its_plan_once_when_it_does_not_fit(narrow_dit, monkeypatch):
    """A run whose plan exceeds the device's memory stops with the advice, having built one plan (it built a
    second one, of both settings, to advise)."""
    from types import SimpleNamespace

    import torch

    import dit_lora.plan as plan_package
    from dit_lora.core.errors import UserError
    from dit_lora.plan import report
    from dit_lora.training.run_start import _memory_plan

    builds, real = [], plan_package.plan_run
    monkeypatch.setattr(plan_package, "plan_run", lambda *a, **k: builds.append(k) or real(*a, **k))
    monkeypatch.setattr(report, "device_memory", lambda device: 1 << 20)  # a 1 MiB device
    settings = _count_traces(monkeypatch)
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=1)
    with pytest.raises(UserError, match="would not fit"):
        _memory_plan(cfg, get_family("dit"), accelerator, SimpleNamespace(entry=None), lambda line: None)
    assert len(builds) == 1 and settings == [(False,), (True,)]


@pytest.mark.parametrize("kind", ["lokr", "loha", "dora"])
def test_every_adapter_type_plans_and_counts_its_own_weights(narrow_dit, kind):
    """LoKr and LoHa draw their module dropout on the host in training (a value fake tensors cannot give): the plan
    traces them always on, and counts each type's trainable weights (a run of these types once failed at its plan)."""
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1)
    typed = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1,
                        lora_type=kind)
    plain, plan = (make_plan(c, get_family("dit"), device="cuda", both_settings=False) for c in (cfg, typed))
    assert plan.peak_memory_bytes > 0 and plan.trainable_params != plain.trainable_params


def test_the_plan_counts_8bit_adam_as_the_run_allocates_it(monkeypatch):
    """--use_8bit_adam was planned with fp32 moments: 4x the moments (and the guard's snapshot of them), which put
    ai-toolkit's and diffusion-pipe's adamw8bit settings over a card they fit."""
    from dit_lora.plan.report import format_plan

    # 128-wide: rank 32 is 4,096 each
    stand_in_configs(monkeypatch, HUB_ID, {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 64})
    common = dict(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1, rank=32)
    plain, eight = (make_plan(TrainConfig(**common, use_8bit_adam=on), get_family("dit"), device="cuda",
                              both_settings=False) for on in (False, True))
    assert plain.optimizer_bytes == 8 * plain.trainable_params
    assert eight.optimizer_bytes == 2 * plain.trainable_params + 8 * (plain.trainable_params // 256)
    saved = plain.optimizer_bytes - eight.optimizer_bytes
    assert plain.snapshot_bytes - eight.snapshot_bytes == saved  # the guard snapshots the moments it keeps
    assert plain.train_phase_bytes() - eight.train_phase_bytes() == 2 * saved
    assert "optimizer moments (8-bit AdamW, bitsandbytes)" in format_plan(eight)
    assert "optimizer moments (AdamW, fp32)" in format_plan(plain)


@pytest.mark.parametrize("name,bits", [("adamw8bit", 8), ("adamw4bit", 4)])
def test_the_plan_counts_torchaos_low_bit_adamw_as_the_run_keeps_it(monkeypatch, name, bits):
    """--optimizer adamw8bit|adamw4bit: torchao's quantized moments (tests/training/test_lowbit_adam.py checks the
    count against the optimizer's own tensors), in the moments' row and the guard's snapshot of them."""
    from dit_lora.config.optimizer_state import lowbit_adam_state_bytes
    from dit_lora.plan.report import format_plan

    stand_in_configs(monkeypatch, HUB_ID, {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 64})
    common = dict(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1, rank=32)
    plain, low = (make_plan(TrainConfig(**common, optimizer=o), get_family("dit"), device="cuda",
                            both_settings=False) for o in ("adamw", name))
    assert low.optimizer_bytes < plain.optimizer_bytes / (3 if bits == 8 else 6)
    assert plain.snapshot_bytes - low.snapshot_bytes == plain.optimizer_bytes - low.optimizer_bytes
    assert f"optimizer moments ({bits}-bit AdamW, torchao)" in format_plan(low)
    assert lowbit_adam_state_bytes([32 * 4096, 100], bits=bits) == (
        2 * (32 * 4096 * bits // 8 + 4 * 32 * 4096 // (256 if bits == 8 else 128) + 4 * (256 if bits == 8 else 16))
        + 2 * 4 * 100 + 2 * 4)  # a quantized matrix, a small tensor kept in fp32, and each one's step count


def test_the_plan_names_came_and_counts_its_factored_state(monkeypatch):
    """--optimizer came: config/optimizer_state.came_state_bytes (tests/training/test_came.py checks it against the optimizer's
    own tensors) in the moments' row, which names CAME: a first moment and each matrix's rows and columns, so more
    than half of AdamW's two moments and less than them, and the guard's snapshot holds it."""
    from dit_lora.plan.report import format_plan

    stand_in_configs(monkeypatch, HUB_ID, {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 64})
    common = dict(family="dit", pretrained_model_name_or_path=HUB_ID, resolution=64, train_batch_size=1, rank=32)
    plain, came = (make_plan(TrainConfig(**common, optimizer=o), get_family("dit"), device="cuda",
                             both_settings=False) for o in ("adamw", "came"))
    assert plain.optimizer_bytes / 2 < came.optimizer_bytes < plain.optimizer_bytes
    assert plain.snapshot_bytes - came.snapshot_bytes == plain.optimizer_bytes - came.optimizer_bytes
    assert came.optimizer == "came" and "optimizer moments (CAME, fp32)" in format_plan(came)


def test_plan_takes_8bit_adam_without_a_gpu():
    """`dit-lora plan --use_8bit_adam true` refused on a machine without CUDA ("needs bitsandbytes on a CUDA GPU"),
    though it plans a GPU it is not on and imports nothing; the run itself still checks where it starts."""
    import torch

    from dit_lora.config.parser import parse_config
    from dit_lora.core.errors import UserError

    argv = ["--family", "dit", "--pretrained_model_name_or_path", HUB_ID, "--use_8bit_adam", "true"]
    assert parse_config(argv, needs_data=False).training.use_8bit_adam
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="needs bitsandbytes on a CUDA GPU"):
            parse_config([*argv, "--train_data_dir", "data"])
