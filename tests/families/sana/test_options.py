"""families/sana/options.py: Sana's own flags parse into cfg.family_options (with the flow-matching group)."""

from dit_lora.config import parse_config

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data", "--family", "sana"]


def test_sana_flags():
    cfg = parse_config(MIN + ["--complex_human_instruction", "false", "--trim_text_padding=false",
                              "--weighting_scheme", "mode", "--mode_scale", "-2", "--logit_std", "0.5"])
    o = cfg.family_options
    assert (o.complex_human_instruction, o.trim_text_padding, o.weighting_scheme, o.mode_scale, o.logit_std) == (
        False, False, "mode", -2.0, 0.5)
