"""training/optim.py: the optimizer (fused AdamW, its fallback, bitsandbytes' 8-bit AdamW, torchao's low-bit AdamW) and
the learning-rate schedule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.training import optim


def _cfg(**changes):
    values = dict(adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-7, adam_weight_decay=0.01, use_8bit_adam=False,
                  optimizer="adamw",
                  lr_scheduler="constant_with_warmup", lr_warmup_steps=2, lr_num_cycles=1, lr_power=1.0)
    return SimpleNamespace(**{**values, **changes})


def _groups():
    return [{"params": [torch.nn.Parameter(torch.ones(3))], "lr": 0.1}]


def test_fused_adamw_with_the_configured_hyperparameters():
    optimizer, fused = optim.make_optimizer(_cfg(), _groups(), torch.device("cpu"))
    assert isinstance(optimizer, torch.optim.AdamW) and fused
    group = optimizer.param_groups[0]
    assert group["fused"] and group["betas"] == (0.8, 0.95) and group["eps"] == 1e-7
    assert group["weight_decay"] == 0.01 and group["lr"] == 0.1


def test_falls_back_to_foreach_where_fused_is_refused(monkeypatch):
    class PickyAdamW(torch.optim.AdamW):
        def __init__(self, params, fused=None, **kwargs):
            if fused:  # as torch does for parameters of an unsupported device or dtype
                raise RuntimeError("`fused=True` requires all the params to be floating point Tensors")
            super().__init__(params, fused=fused, **kwargs)

    monkeypatch.setattr(optim.torch.optim, "AdamW", PickyAdamW)
    optimizer, fused = optim.make_optimizer(_cfg(), _groups(), torch.device("cpu"))
    assert not fused and optimizer.param_groups[0]["foreach"] and not optimizer.param_groups[0]["fused"]


def test_an_unsupported_device_is_not_fused():
    optimizer, fused = optim.make_optimizer(_cfg(), _groups(), torch.device("meta"))
    assert not fused and not optimizer.param_groups[0]["fused"]


def test_8bit_adam_without_bitsandbytes_is_one_paragraph(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_bnb(name, *args, **kwargs):
        if name == "bitsandbytes":
            raise ImportError("No module named 'bitsandbytes'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bnb)
    with pytest.raises(UserError, match=r"--use_8bit_adam could not import bitsandbytes .*pip install"):
        optim.make_optimizer(_cfg(use_8bit_adam=True), _groups(), torch.device("cpu"))


def test_lr_schedule_warms_up_then_holds():
    optimizer, _ = optim.make_optimizer(_cfg(), _groups(), torch.device("cpu"))
    scheduler = optim.make_lr_scheduler(_cfg(), optimizer, max_steps=10)
    rates = []
    for _ in range(4):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.1])


def test_lr_schedule_decays_to_zero_at_max_steps():
    optimizer, _ = optim.make_optimizer(_cfg(), _groups(), torch.device("cpu"))
    scheduler = optim.make_lr_scheduler(_cfg(lr_scheduler="linear", lr_warmup_steps=0), optimizer, max_steps=4)
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.0)


def test_the_optimizer_and_schedule_read_the_training_section():
    """They receive ``cfg.training``, not the whole config."""
    from dit_lora.config import TrainConfig

    training = TrainConfig(adam_beta1=0.7, adam_epsilon=1e-6, lr_scheduler="linear", lr_warmup_steps=0).training
    optimizer, _ = optim.make_optimizer(training, _groups(), torch.device("cpu"))
    assert optimizer.param_groups[0]["betas"][0] == 0.7 and optimizer.param_groups[0]["eps"] == 1e-6
    scheduler = optim.make_lr_scheduler(training, optimizer, max_steps=4)
    assert scheduler.lr_lambdas[0](2) == 0.5


def test_prodigy_is_the_device_side_one_with_diffusers_arguments_and_skipped_on_the_device():
    from dit_lora.training.prodigy import DeviceProdigy

    opt, device_skip = optim.make_optimizer(
        _cfg(optimizer="prodigy", learning_rate=1.0, prodigy_beta3=0.97, prodigy_decouple=True,
             prodigy_use_bias_correction=True, prodigy_safeguard_warmup=False), _groups(), torch.device("cpu"))
    assert isinstance(opt, DeviceProdigy) and device_skip
    group = opt.param_groups[0]
    assert group["betas"] == (0.8, 0.95) and group["beta3"] == 0.97 and group["eps"] == 1e-7
    assert group["weight_decay"] == 0.01 and group["use_bias_correction"] and not group["safeguard_warmup"]


def test_adafactor_is_the_device_side_one_with_its_options_and_skipped_on_the_device():
    from dit_lora.training.adafactor import DeviceAdafactor

    opt, device_skip = optim.make_optimizer(
        _cfg(optimizer="adafactor", learning_rate=3e-4, adafactor_scale_parameter=True, adafactor_beta1=0.9,
             adafactor_clip_threshold=0.5, adafactor_decay_rate=-0.7), _groups(), torch.device("cpu"))
    assert isinstance(opt, DeviceAdafactor) and device_skip
    group = opt.param_groups[0]
    assert opt.defaults["lr"] == 3e-4 and group["lr"] == 0.1  # a group keeps its own (LoRA+, a backbone)
    assert group["beta1"] == 0.9 and group["scale_parameter"]
    assert group["clip_threshold"] == 0.5 and group["decay_rate"] == -0.7 and group["weight_decay"] == 0.01


def test_came_is_the_device_side_one_with_the_adam_betas_and_skipped_on_the_device():
    from dit_lora.training.came import DeviceCAME

    opt, device_skip = optim.make_optimizer(
        _cfg(optimizer="came", learning_rate=3e-4, came_beta3=0.999, came_clip_threshold=0.5), _groups(),
        torch.device("cpu"))
    assert isinstance(opt, DeviceCAME) and device_skip
    group = opt.param_groups[0]
    assert opt.defaults["lr"] == 3e-4 and group["lr"] == 0.1  # a group keeps its own (LoRA+, a backbone)
    assert group["betas"] == (0.8, 0.95, 0.999) and group["eps"] == (1e-30, 1e-16)  # came-pytorch's floors
    assert group["clip_threshold"] == 0.5 and group["weight_decay"] == 0.01


@pytest.mark.parametrize("name,bits", [("adamw8bit", 8), ("adamw4bit", 4)])
def test_torchaos_low_bit_adamw_takes_the_adam_options_and_is_skipped_on_the_device(name, bits):
    pytest.importorskip("torchao")
    from dit_lora.training.lowbit_adam import DeviceLowBitAdamW, torchao_optimizers

    opt, device_skip = optim.make_optimizer(_cfg(optimizer=name, learning_rate=3e-4), _groups(), torch.device("cpu"))
    assert isinstance(opt, DeviceLowBitAdamW) and isinstance(opt, torchao_optimizers()[bits == 4]) and device_skip
    group = opt.param_groups[0]
    assert group["betas"] == (0.8, 0.95) and group["eps"] == 1e-7 and group["weight_decay"] == 0.01
    assert float(group["lr"]) == pytest.approx(0.1)  # a group keeps its own (a tensor, as torchao reads it)


def test_low_bit_adamw_without_torchao_is_one_paragraph(monkeypatch):
    import builtins

    from dit_lora.training import lowbit_adam

    real_import = builtins.__import__

    def no_torchao(name, *args, **kwargs):
        if name.startswith("torchao"):
            raise ImportError("No module named 'torchao'")
        return real_import(name, *args, **kwargs)

    lowbit_adam.device_class.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_torchao)
    try:
        with pytest.raises(UserError, match=r"--optimizer adamw4bit could not import torchao .*pip install"):
            optim.make_optimizer(_cfg(optimizer="adamw4bit", learning_rate=1e-4), _groups(), torch.device("cpu"))
    finally:
        lowbit_adam.device_class.cache_clear()


def test_every_table_entry_has_a_builder_and_every_builder_an_entry():
    """The optimizer table (config/optimizers.py) and the builders here name the same optimizers."""
    from dit_lora.config import optimizers

    assert set(optim.BUILDERS) == set(optimizers.TABLE) and len(optim.BUILDERS) == len(optimizers.TABLE)


@pytest.mark.parametrize("name,eight_bit", [("adamw", False), ("adamw", True), ("prodigy", False),
                                            ("adafactor", False), ("came", False), ("adamw8bit", False),
                                            ("adamw4bit", False)])
def test_each_optimizer_is_its_entrys_builders_and_skipped_where_its_entry_says(name, eight_bit):
    """make_optimizer builds the entry the options choose with that entry's builder; the guard skips its step on the
    device as the entry's guard_skip says (AdamW: where the fused kernel runs, on a CPU here)."""
    from dit_lora.config import TrainConfig, optimizers

    entry = optimizers.chosen(name, eight_bit)
    if entry.package is not None:
        pytest.importorskip(entry.package.module)
    training = TrainConfig(optimizer=name, use_8bit_adam=eight_bit, learning_rate=1e-4).training
    made, skip = optim.make_optimizer(training, _groups(), torch.device("cpu"))
    again = optim.BUILDERS[entry](entry, training, _groups(), torch.device("cpu"))
    assert type(made) is type(again)
    assert skip is (True if entry.guard_skip is None else entry.guard_skip)
