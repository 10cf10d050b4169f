"""config/lycoris_args.py: kohya's --network_args words as dit-lora's flags, in the unknown-option paragraph."""

from __future__ import annotations

import pytest

from dit_lora.config.lycoris_args import network_args_values, translate_network_args
from dit_lora.core.errors import UserError


@pytest.mark.parametrize(
    ("words", "flags"),
    [
        (["algo=lokr", "factor=8"], "--lora_type lokr --lokr_factor 8"),
        (["algo=loha", "use_tucker=True", "module_dropout=0.1"],
         "--lora_type loha --use_effective_conv2d true --module_dropout 0.1"),
        (["algo=lora", "dora_wd=True"], "--lora_type dora"),
        (["algo=lokr", "decompose_both=true", "rank_dropout=0.05"],
         "--lora_type lokr --lokr_decompose_both true --rank_dropout 0.05"),
        (["algo=lokr,factor=4"], "--lora_type lokr --lokr_factor 4"),  # a YAML string with commas
    ],
)
def test_lycoris_words_become_the_flags_of_the_same_adapter(words, flags):
    sentence = translate_network_args(words)
    assert f"in dit-lora's flags: {flags}." in sentence or f"in dit-lora's flags: {flags};" in sentence


def test_what_does_not_translate_is_named_not_dropped():
    sentence = translate_network_args(["algo=lokr", "conv_dim=4", "preset=attn-mlp", "algo_extra"])
    assert "--lora_type lokr" in sentence
    assert "not translated: conv_dim=4, preset=attn-mlp, algo_extra" in sentence
    assert "not translated: dora_wd with algo=loha" in translate_network_args(["algo=loha", "dora_wd=True"])
    assert "algo=glora (dit-lora trains lora, dora, lokr and loha)" in translate_network_args(["algo=glora"])
    assert translate_network_args([]) is None


def test_words_are_read_after_the_flag_up_to_the_next():
    args = ["--network_module", "lycoris.kohya", "--network_args", "algo=lokr", "factor=8", "--rank", "4"]
    assert network_args_values(args) == ["algo=lokr", "factor=8"]
    assert network_args_values(["--network_args=algo=loha"]) == ["algo=loha"]
    assert network_args_values(["--rank", "4"]) == []


def test_the_unknown_option_paragraph_carries_the_translation(tmp_path):
    from dit_lora.config import parse_config

    base = ["--pretrained_model_name_or_path", "m", "--train_data_dir", "d"]
    with pytest.raises(UserError) as err:
        parse_config([*base, "--network_module", "lycoris.kohya", "--network_args", "algo=lokr", "factor=8"])
    text = str(err.value)
    assert "--network_module" in text and "Your --network_args algo=lokr factor=8 in dit-lora's flags: --lora_type " \
        "lokr --lokr_factor 8." in text
    config = tmp_path / "kohya.yaml"
    config.write_text("pretrained_model_name_or_path: m\ntrain_data_dir: d\nnetwork_args: [algo=loha]\n")
    with pytest.raises(UserError, match="in dit-lora's flags: --lora_type loha"):
        parse_config(["--config", str(config)])
