"""families/zimage/options.py: Z-Image's flags (the shared timestep density) parse into cfg.family_options."""

from dit_lora.config import parse_config

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


def test_zimage_flags():
    cfg = parse_config(MIN + ["--family", "zimage", "--timestep_sampling", "logit_normal", "--logit_std", "0.5"])
    o = cfg.family_options
    assert (o.timestep_sampling, o.logit_mean, o.logit_std) == ("logit_normal", 0.0, 0.5)
    assert parse_config(MIN + ["--family", "zimage"]).family_options.timestep_sampling == "uniform"
