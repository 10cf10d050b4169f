"""families/zimage/options.py: Z-Image's flags (the shared timestep density) parse into cfg.family_options."""

from dit_lora.config import parse_config

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


def test_zimage_flags():
    cfg = parse_config(MIN + ["--family", "zimage", "--timestep_sampling", "logit_normal", "--logit_std", "0.5"])
    o = cfg.family_options
    assert (o.timestep_sampling, o.logit_mean, o.logit_std) == ("logit_normal", 0.0, 0.5)
    assert parse_config(MIN + ["--family", "zimage"]).family_options.timestep_sampling == "uniform"


def test_flow_shift_is_the_shared_option_and_replaces_the_checkpoints_training_shift():
    """--flow_shift (musubi-tuner's --discrete_flow_shift; shared with Wan) replaces the scheduler's shift of the
    training schedule only; without it the checkpoint's stays."""
    from dit_lora.config.owners import owners
    from dit_lora.families.zimage.model import with_flow_shift
    from dit_lora.modeling.flow_matching import training_scheduler

    assert {"wan", "zimage"} <= set(owners("flow_shift"))
    checkpoint = {"num_train_timesteps": 1000, "shift": 6.0}
    assert with_flow_shift(checkpoint, None) == checkpoint
    assert training_scheduler(with_flow_shift(checkpoint, 2.0)).config.shift == 2.0
    assert training_scheduler(with_flow_shift(checkpoint, None)).config.shift == 6.0 and checkpoint["shift"] == 6.0
