"""The EMA of the trainable weights (``--use_ema``) on its own: diffusers' decay and update, skipped steps, rollbacks,
checkpoints, the swap for validation, the option checks. A toy model and the real StepGuard; no recipe."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.training.ema import EMA_FILE, TrainableEMA, check_options, ema_decay, start, validation_weights
from dit_lora.training.guard import StepGuard
from dit_lora.training.sync_audit import SyncAudit


def _check(cfg: TrainConfig) -> None:
    """ema.check_options on what it reads of ``cfg``."""
    check_options(cfg.training, cfg.validation, cfg.explicit)


def _training(**values):
    return TrainConfig.for_family("sana", use_ema=True, **values).training


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model[0].bias.requires_grad_(False)  # a frozen weight: never in the EMA
    return model


def _trainables(model) -> dict:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _nudge(model, seed: int) -> None:
    """An optimizer update stand-in: every trainable weight moves."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in _trainables(model).values():
            p.add_((torch.randn(p.shape, generator=g) * 0.1).to(p.device))


@pytest.mark.parametrize(
    "options",
    [
        {"decay": 0.9999},
        {"decay": 0.95, "update_after_step": 3},
        {"decay": 0.999, "use_warmup": True, "inv_gamma": 1.0, "power": 3 / 4},
        {"decay": 0.9, "use_warmup": True, "inv_gamma": 2.0, "power": 2 / 3, "update_after_step": 2},
    ],
)
def test_the_decay_is_diffusers_emamodel_decay(options):
    """ema_decay on a device count is EMAModel.get_decay of the same step, for plain, delayed and warmed-up EMAs."""
    from diffusers.training_utils import EMAModel

    reference = EMAModel(
        [torch.nn.Parameter(torch.zeros(1))],
        decay=options["decay"],
        update_after_step=options.get("update_after_step", 0),
        use_ema_warmup=options.get("use_warmup", False),
        inv_gamma=options.get("inv_gamma", 1.0),
        power=options.get("power", 2 / 3),
    )
    steps = torch.arange(1, 200, dtype=torch.float64)
    ours = ema_decay(steps, **options).tolist()
    theirs = [reference.get_decay(int(n)) for n in steps]
    assert ours == pytest.approx(theirs, rel=1e-14, abs=1e-15)
    assert ours[0] == 0.0 and max(ours) <= options["decay"]


def test_updates_match_diffusers_emamodel_and_leave_the_frozen_weights_out():
    from diffusers.training_utils import EMAModel

    model = _model()
    params = _trainables(model)
    ema = TrainableEMA(params, _training(ema_decay=0.9), torch.device("cpu"), on_host=False)
    reference = EMAModel(list(params.values()), decay=0.9, foreach=True)
    for k in range(6):
        _nudge(model, k)
        ema.update(torch.zeros(()))
        reference.step(list(params.values()))
    assert "0.bias" not in ema.names and len(ema.shadow) == len(params) == 3
    for ours, theirs in zip(ema.shadow, reference.shadow_params):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    assert int(ema.updates) == 6
    assert not torch.equal(ema.shadow[0], params["0.weight"])  # an average, not the last weights


def test_a_skipped_update_leaves_the_ema_bit_for_bit_without_a_host_read():
    """The guard's skip flag is a device tensor: the update weighs itself by it inside an audited step (any host read
    would raise), and a skipped step keeps the average and its count exactly."""
    model = _model()
    ema = TrainableEMA(_trainables(model), _training(ema_decay=0.9), torch.device("cpu"), on_host=False)
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    flags = [0.0, 0.0, 1.0, 0.0]
    seen = []
    for k, flag in enumerate(flags):
        _nudge(model, k)  # a skipped step would not move the weights; the EMA must not even look
        skipped = torch.full((), flag, device=torch.device("cpu"))
        with audit.step():
            ema.update(skipped)
        seen.append(([s.clone() for s in ema.shadow], float(ema.updates)))
    assert all(torch.equal(a, b) for a, b in zip(seen[2][0], seen[1][0])) and seen[2][1] == seen[1][1] == 2
    assert not torch.equal(seen[3][0][0], seen[2][0][0]) and seen[3][1] == 3
    assert sum(audit.passed.values()) == 0


def test_the_update_interval_averages_every_nth_update():
    model = _model()
    ema = TrainableEMA(_trainables(model), _training(ema_decay=0.9, ema_update_interval=2), torch.device("cpu"), False)
    for k in range(5):
        _nudge(model, k)
        ema.update(torch.zeros(()))
    assert int(ema.updates) == 2 and ema.calls == 5


def test_a_rollback_restores_the_ema_with_the_weights():
    """A follower of the guard: the snapshot taken with the weights' is what a rollback restores, count included."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    guard = StepGuard(opt, [lambda k: 1.0], 16, torch.device("cpu"), enabled=True, fused=True, interval=2,
                      max_consecutive_skips=2, rollback_lr_factor=0.5, max_rollbacks=3, spike_sigma=None, world_size=1)
    ema = TrainableEMA(_trainables(model), _training(ema_decay=0.9), torch.device("cpu"), on_host=False)
    guard.followers.append(ema)
    for k in range(2):
        _nudge(model, k)
        ema.update(torch.zeros(()))
    guard.take_snapshot(model, 2)
    kept = [s.clone() for s in ema.shadow]
    for k in range(2, 5):
        _nudge(model, k)
        ema.update(torch.zeros(()))
    assert not torch.equal(ema.shadow[0], kept[0])
    guard.roll_back(model, 5)
    assert all(torch.equal(a, b) for a, b in zip(ema.shadow, kept)) and int(ema.updates) == 2


def test_an_ema_started_at_a_resume_rolls_back_to_the_weights():
    """No snapshot yet (the EMA began at a resume of a run without one): a rollback restarts it from the weights."""
    model = _model()
    ema = TrainableEMA(_trainables(model), _training(ema_decay=0.9), torch.device("cpu"), on_host=False)
    _nudge(model, 0)
    ema.update(torch.zeros(()))
    _nudge(model, 1)
    ema.roll_back()
    assert all(torch.equal(s, p) for s, p in zip(ema.shadow, _trainables(model).values())) and int(ema.updates) == 0


def test_the_checkpoint_file_restores_everything_bit_for_bit(tmp_path):
    model = _model()
    ema = TrainableEMA(_trainables(model), _training(ema_decay=0.9), torch.device("cpu"), on_host=False)
    for k in range(3):
        _nudge(model, k)
        ema.update(torch.zeros(()))
        if k == 1:
            ema.take_snapshot()
    ema.write(tmp_path)
    other = TrainableEMA(_trainables(_model(seed=1)), _training(ema_decay=0.9), torch.device("cpu"), on_host=False)
    assert other.load(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(ema.shadow, other.shadow))
    assert float(other.updates) == 3 and other.calls == 3
    assert other.state_tensors().keys() == ema.state_tensors().keys()
    assert all(torch.equal(v, other.state_tensors()[k]) for k, v in ema.state_tensors().items())
    assert not other.load(tmp_path / "nowhere")  # a checkpoint without an EMA
    wider = torch.nn.Linear(3, 3)
    with pytest.raises(UserError, match="other trainable weights"):
        TrainableEMA(dict(wider.named_parameters()), _training(), torch.device("cpu"), on_host=False).load(tmp_path)


def test_validation_swaps_the_ema_in_and_the_trained_weights_back_exactly():
    model = _model()
    ema = TrainableEMA(_trainables(model), _training(ema_decay=0.9), torch.device("cpu"), on_host=False)
    for k in range(3):
        _nudge(model, k)
        ema.update(torch.zeros(()))
    trained = {n: p.clone() for n, p in _trainables(model).items()}
    suffixes = []
    for suffix, weights in validation_weights(ema, "both"):
        with weights:
            inside = _trainables(model)["2.weight"].clone()
            suffixes.append(suffix)
            if suffix:
                assert torch.equal(inside, ema.shadow[ema.names.index("2.weight")])
            else:
                assert torch.equal(inside, trained["2.weight"])
    assert suffixes == ["", "_ema"]
    assert all(torch.equal(p, trained[n]) for n, p in _trainables(model).items())
    assert [s for s, _ in validation_weights(None, "both")] == [""]
    assert [s for s, _ in validation_weights(ema, "ema")] == ["_ema"]


def test_ema_validation_without_a_validation_prompt_is_refused():
    given = frozenset({"use_ema", "ema_validation"})
    with pytest.raises(UserError, match="--ema_validation both .* no --validation_prompt"):
        _check(TrainConfig.for_family("sana", use_ema=True, ema_validation="both", explicit=given))
    _check(TrainConfig.for_family("sana", use_ema=True, ema_validation="both", validation_prompt="a cat",
                                  explicit=given | {"validation_prompt"}))
    _check(TrainConfig.for_family("sana", use_ema=True, ema_validation="trained", explicit=given))


def test_ema_options_without_use_ema_are_refused():
    from dit_lora.config import parse_config

    given = frozenset({"ema_decay", "ema_device"})
    with pytest.raises(UserError, match="--ema_decay is set but --use_ema is not"):
        _check(TrainConfig.for_family("sana", ema_decay=0.99, ema_device="cpu", explicit=given))
    _check(TrainConfig.for_family("sana", use_ema=True, ema_decay=0.99, explicit=given | {"use_ema"}))
    _check(TrainConfig.for_family("sana", ema_decay=0.99))  # built in code: nothing counts as set
    shaped = frozenset({"use_ema", "ema_power", "ema_inv_gamma"})
    with pytest.raises(UserError, match="--ema_inv_gamma and --ema_power shape the EMA's warm-up, but --ema_warmup"):
        _check(TrainConfig.for_family("sana", use_ema=True, ema_power=0.75, ema_inv_gamma=2.0, explicit=shaped))
    _check(TrainConfig.for_family("sana", use_ema=True, ema_warmup=True, ema_power=0.75,
                                  explicit=shaped | {"ema_warmup"}))
    args = ["--pretrained_model_name_or_path", "m", "--train_data_dir", "d", "--use_ema", "true"]
    with pytest.raises(UserError, match="ema_decay"):  # its range: 1 would never move
        parse_config([*args, "--ema_decay", "1"])


def test_resuming_a_run_without_an_ema_starts_it_from_the_resumed_weights(tmp_path):
    model, lines = _model(), []
    run = SimpleNamespace(
        cfg=TrainConfig.for_family("sana", use_ema=True, ema_decay=0.9), resume=tmp_path, log=lines.append,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m, device=torch.device("cpu")), model=model,
        state=SimpleNamespace(global_step=7), guard=SimpleNamespace(followers=[]),
    )
    ema = start(run)
    assert ema is not None and run.guard.followers == [ema]
    assert any("holds no EMA; the EMA starts from its weights at step 7" in line for line in lines)
    assert all(torch.equal(s, p) for s, p in zip(ema.shadow, _trainables(model).values()))
    ema.write(tmp_path)  # the checkpoint now holds one; a resume without --use_ema says it is not continued
    run.cfg, lines[:] = TrainConfig.for_family("sana"), []
    assert start(run) is None and "not continued" in lines[0]
    assert (tmp_path / EMA_FILE).is_file()


@pytest.mark.gpu
def test_the_host_ema_equals_the_device_ema_without_a_sync_on_cuda():
    """--ema_device cpu on CUDA: the pinned, non-blocking copies and the CPU average give the device EMA's bits, and the
    steps pass the audit (CUDA's sync debug mode included)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    device = torch.device("cuda")
    model = _model().to(device)
    on_device = TrainableEMA(_trainables(model), _training(ema_decay=0.9), device, on_host=False)
    on_host = TrainableEMA(_trainables(model), _training(ema_decay=0.9), device, on_host=True)
    assert on_host.host and on_host.shadow[0].device.type == "cpu"
    audit = SyncAudit(device, enabled=True)
    for k, flag in enumerate([0.0, 0.0, 1.0, 0.0, 0.0]):
        _nudge(model, k)
        skipped = torch.full((), flag, device=device)
        with audit.step():
            on_device.update(skipped)
            on_host.update(skipped)
    on_host.flush()
    assert all(torch.equal(a.cpu(), b) for a, b in zip(on_device.shadow, on_host.shadow))
    assert float(on_host.updates) == 4


def test_fsdp2_refuses_use_ema_in_one_paragraph():
    from dit_lora.training import fsdp2

    with pytest.raises(UserError, match="does not combine with --use_ema"):
        fsdp2.check_options(TrainConfig.for_family("sana", use_ema=True))


def test_the_memory_plan_counts_the_ema_where_the_device_holds_it():
    from dit_lora.plan.estimate import _ema_bytes

    trainable = [torch.zeros(10, 10), torch.zeros(5)]

    def _sections(cfg):  # the two sections the estimate reads
        return cfg.training, cfg.guards

    assert _ema_bytes(*_sections(TrainConfig.for_family("sana", use_ema=True)), trainable, "cuda") == 4 * 105 * 2  # + snapshot
    assert _ema_bytes(*_sections(TrainConfig.for_family("sana", use_ema=True, finite_guard=False)), trainable, "cuda") == 420
    assert _ema_bytes(*_sections(TrainConfig.for_family("sana", use_ema=True, ema_device="cpu")), trainable, "cuda") == 0
    assert _ema_bytes(*_sections(TrainConfig.for_family("sana", use_ema=True, ema_device="cpu")), trainable, "cpu") == 840
    assert _ema_bytes(*_sections(TrainConfig.for_family("sana")), trainable, "cpu") == 0
