"""config/adapter_types.py: --lora_type and its options, diffusers' --use_dora, the refusals of an option the run's
type never reads (one paragraph each), and the peers' flags for the types."""

from __future__ import annotations

import pytest

from dit_lora.config import parse_config
from dit_lora.config.adapter_types import OWN_OPTIONS, TYPES, type_of_peft_config
from dit_lora.config.peers import peer_hint
from dit_lora.config.schema import LoraOptions, TrainConfig
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


@pytest.mark.parametrize("args, kind", [([], "lora"), (["--lora_type", "lokr"], "lokr"), (["--use_dora"], "dora"),
                                        (["--use_dora", "--lora_type", "dora"], "dora"),
                                        (["--lora_type", "loha", "--use_dora", "false"], "loha"),
                                        (["--lora_type", "standard"], "lora")])  # SimpleTuner's name for lora
def test_the_type_is_read_from_lora_type_or_diffusers_use_dora(args, kind):
    cfg = parse_config(MIN + args)
    assert cfg.lora.lora_type == kind and cfg.lora.use_dora is False  # from here on only lora_type is read


@pytest.mark.parametrize("args, words", [
    (["--use_dora", "--lora_type", "lokr"], ["--use_dora is diffusers' name for --lora_type dora", "Give one"]),
    (["--use_dora", "false", "--lora_type", "dora"], ["disagree", "Remove --use_dora false"]),
    (["--lora_type", "lycoris"], ["SimpleTuner's", "--lycoris_config", "--lora_type lokr or --lora_type loha"]),
])
def test_disagreeing_or_foreign_type_flags_are_one_paragraph(args, words):
    with pytest.raises(UserError) as err:
        parse_config(MIN + args)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert "\n" not in str(err.value)


def test_a_section_built_in_code_reads_use_dora_too():
    assert LoraOptions(use_dora=True).lora_type == "dora"
    assert TrainConfig(use_dora=True).lora.lora_type == "dora"
    with pytest.raises(UserError, match="disagree"):
        LoraOptions(use_dora=True, lora_type="loha")


@pytest.mark.parametrize("kind, option, value", [
    ("lora", "lokr_factor", "4"), ("dora", "rank_dropout", "0.1"), ("lora", "module_dropout", "0.2"),
    ("loha", "lokr_decompose_both", "true"), ("lokr", "lora_dropout", "0.1"), ("loha", "loraplus_lr_ratio", "16"),
    ("dora", "use_effective_conv2d", "true"),
])
def test_an_option_of_another_type_is_refused_naming_its_type_and_the_fix(kind, option, value, tmp_path):
    with pytest.raises(UserError) as err:
        parse_config(MIN + ["--lora_type", kind, f"--{option}", value])
    text = str(err.value)
    readers = " or ".join(f"--lora_type {t}" for t in OWN_OPTIONS[option])
    assert f"--{option} is an option of {readers}" in text and f"--lora_type {kind} ({TYPES[kind].title})" in text
    assert f"remove --{option}" in text and "\n" not in text
    if option == "loraplus_lr_ratio":
        assert "lora_A/lora_B" in text and "would do nothing" in text
    # the same key in a YAML file names the file
    path = tmp_path / "run.yaml"
    path.write_text(f"lora_type: {kind}\n{option}: {value}\n")
    with pytest.raises(UserError, match=f"`{option}` in {path}.*remove `{option}` from {path}"):
        parse_config(MIN + ["--config", str(path)])


def test_the_types_own_options_are_accepted_and_defaults_never_refused():
    cfg = parse_config(MIN + ["--lora_type", "lokr", "--lokr_factor", "8", "--lokr_decompose_both", "--rank_dropout",
                              "0.1", "--module_dropout", "0.2", "--use_effective_conv2d"])
    assert (cfg.lora.lokr_factor, cfg.lora.lokr_decompose_both, cfg.lora.rank_dropout, cfg.lora.module_dropout) == (8, True, 0.1, 0.2)
    parse_config(MIN + ["--lora_type", "loha", "--lora_dropout", "0"])  # a default given explicitly changes nothing
    parse_config(MIN + ["--lora_type", "dora", "--loraplus_lr_ratio", "4"])  # PEFT's LoRA+ groups DoRA's lora_A/B
    with pytest.raises(UserError, match="--lokr_factor .* >= 1"):
        parse_config(MIN + ["--lora_type", "lokr", "--lokr_factor", "0"])


@pytest.mark.parametrize("config, kind", [({"peft_type": "LOKR"}, "lokr"), ({"peft_type": "LOHA"}, "loha"),
                                          ({"peft_type": "LORA", "use_dora": True}, "dora"), ({"r": 4}, "lora")])
def test_the_type_of_a_saved_peft_config(config, kind):
    assert type_of_peft_config(config) == kind


def test_peers_flags_name_the_type_options():
    options = ["lora_type", "lokr_factor", "rank", "lora_alpha"]
    assert "--lora_type" in peer_hint("network_module", options)
    hint = peer_hint("network_args", options)
    assert "algo=lokr|loha: --lora_type lokr|loha" in hint and "factor=N: --lokr_factor N" in hint
    hint = peer_hint("lycoris_config", options)
    assert "linear_dim -> --rank" in hint and "leave --lora_alpha unset" in hint
    assert "--lora_type" in peer_hint("type", options)  # ai-toolkit's network: type: lokr
    assert "has no dit-lora equivalent" in peer_hint("lokr_full_rank", options)


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_lokr_loha_on_an_nf4_base_are_refused(kind):
    """PEFT's LoKr/LoHa reshape their update to the base layer's weight, packed by bitsandbytes' 4-bit layer (seen:
    a RuntimeError in the first forward); int8 and fp8_scaled keep the weight's shape and are accepted."""
    with pytest.raises(UserError, match=f"--lora_type {kind} cannot train on --quantize_base nf4.*fp8_scaled"):
        parse_config(MIN + ["--lora_type", kind, "--quantize_base", "nf4"])
    assert parse_config(MIN + ["--lora_type", kind, "--quantize_base", "fp8_scaled"]).lora.lora_type == kind
    assert parse_config(MIN + ["--lora_type", "dora", "--quantize_base", "nf4"]).lora.lora_type == "dora"


def test_lycoris_full_matrix_lokr_with_a_small_alpha_is_refused():
    """LyCORIS users write linear_dim 10000 with a small alpha for a full-matrix LoKr (scale 1 there); PEFT's scale
    alpha / rank would leave the adapter at almost no strength: refused, alpha = rank accepted."""
    from dit_lora.config.adapter_types import check_type_options

    cfg = TrainConfig.for_family("sana", lora_type="lokr", rank=100000, lora_alpha=8)
    with pytest.raises(UserError, match=r"full-matrix LoKr.*alpha / rank = 8e-05.*Leave --lora_alpha unset"):
        check_type_options(cfg)
    check_type_options(TrainConfig.for_family("sana", lora_type="lokr", rank=100000))
    check_type_options(TrainConfig.for_family("sana", lora_type="lokr", rank=16, lora_alpha=8))
    check_type_options(TrainConfig.for_family("sana", lora_type="loha", rank=100000, lora_alpha=8))


def test_a_type_written_as_its_paper_writes_it_is_pointed_to_its_name():
    with pytest.raises(UserError, match="Did you mean `lokr`"):
        parse_config(["--pretrained_model_name_or_path", "m", "--train_data_dir", "d", "--lora_type", "LoKr"])
