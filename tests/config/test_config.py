"""Config parsing and the fail-fast checks that run before any model loads."""

from __future__ import annotations

import re
import time

import pytest
import yaml

from helpers import base_args, run_recipe
from dit_lora.config import parse_config
from dit_lora.config.schema import TrainConfig
from dit_lora.core.errors import UserError

MIN = ["--pretrained_model_name_or_path", "org/model", "--train_data_dir", "data"]


def test_yaml_then_flags_command_line_wins(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"rank": 8, "learning_rate": 5e-4, "lora_layers": ["to_q", "to_v"],
                                    "pretrained_model_name_or_path": "org/model", "train_data_dir": "d"}))
    cfg = parse_config(["--config", str(path), "--rank", "32", "--random_flip"])
    assert cfg.lora.rank == 32 and cfg.training.learning_rate == 5e-4 and cfg.lora.lora_layers == ["to_q", "to_v"]
    assert cfg.data.random_flip is True and cfg.data.center_crop is False
    assert cfg.effective_lora_alpha == 32.0


@pytest.mark.parametrize("argv,pattern", [
    (["--rnak", "4"], "Unknown option `--rnak`.*--rank"),
    (["--rank", "0"], "--rank is 0; it must be an integer > 0"),
    (["--rank", "-3"], "--rank is -3"),
    (["--rank", "four"], "not a valid int"),
    (["--mixed_precision", "fp16"], "fp16 is refused.*--allow_fp16"),
    (["--lr_scheduler", "cosin"], "Did you mean `cosine`"),
    (["--weighting_scheme", "logit"], "not one of none, logit_normal"),
    (["--max_bad_samples_fraction", "1.5"], "max_bad_samples_fraction"),
    (["--loraplus_lr_ratio", "0.5"], "--loraplus_lr_ratio is 0.5; it must be a number >= 1: LoRA"),
    (["--max_consecutive_skips", "0"], "--max_consecutive_skips is 0; it must be an integer > 0"),
    (["--rollback_lr_factor", "0"], r"--rollback_lr_factor is 0; it must be a number in \(0, 1\]"),
    (["--rollback_lr_factor", "2"], "multiplies the learning rates"),
    (["--max_rollbacks", "-1"], "--max_rollbacks is -1"),
    (["--skip_loss_spikes", "0"], "--skip_loss_spikes is 0; it must be a number > 0"),
    (["--family", "dit", "--num_classes", "0"], "--num_classes is 0"),
])
def test_bad_values_fail_with_named_flag(argv, pattern):
    with pytest.raises(UserError, match=pattern):
        parse_config(MIN + argv)


def test_diffusers_flag_names_exist():
    from dit_lora.config.owners import all_option_names

    names = set(all_option_names())  # common or a family's (Sana's flow-matching options)
    for name in ("pretrained_model_name_or_path revision variant output_dir seed resolution center_crop random_flip "
                 "train_batch_size gradient_accumulation_steps max_train_steps num_train_epochs learning_rate "
                 "lr_scheduler lr_warmup_steps max_grad_norm rank lora_alpha lora_dropout lora_layers "
                 "mixed_precision gradient_checkpointing checkpointing_steps checkpoints_total_limit "
                 "resume_from_checkpoint cache_latents validation_prompt validation_steps report_to push_to_hub "
                 "hub_model_id use_8bit_adam dataloader_num_workers weighting_scheme logit_mean logit_std "
                 "mode_scale train_data_dir dataset_name image_column caption_column").split():
        assert name in names
    assert TrainConfig().training.mixed_precision == "bf16"


def _assert_clean_failure(proc, *needles):
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, text
    assert "Traceback" not in text, text
    for needle in needles:
        assert needle in text, text


@pytest.mark.slow
def test_recipe_bad_inputs_end_in_seconds_without_traceback(tmp_path, tiny_sana, shapes_data):
    cache = tmp_path / "cache"
    # A resolution the DC-AE cannot divide, from a fresh interpreter: the seconds a user waits include the imports.
    start = time.time()
    _assert_clean_failure(run_recipe(base_args(tiny_sana, shapes_data, tmp_path / "o1", cache, resolution=70)),
                          "--resolution 70 is not divisible")
    assert time.time() - start < 90
    # A missing model, a missing data folder, a misspelled flag: what the recipe says, not how its process starts,
    # so forks of a warm interpreter (tests/support/warm.py), the imports paid once above. Each must end within
    # 90 s of its own (the run's timeout counts from the fork, not from a warm interpreter's first start).
    warm = dict(warm=True, timeout=90)
    _assert_clean_failure(run_recipe(base_args(tmp_path / "nope", shapes_data, tmp_path / "o2", cache), **warm),
                          "does not exist")
    _assert_clean_failure(run_recipe(base_args(tiny_sana, tmp_path / "nodata", tmp_path / "o3", cache), **warm),
                          "--train_data_dir")
    misspelt = base_args(tiny_sana, shapes_data, tmp_path / "o4", cache) + ["--lerning_rate", "1"]
    _assert_clean_failure(run_recipe(misspelt, **warm), "--learning_rate")


@pytest.mark.slow
def test_finished_output_dir_is_not_overwritten(tmp_path, tiny_sana, shapes_data):
    out = tmp_path / "out"
    out.mkdir()
    (out / "pytorch_lora_weights.safetensors").write_bytes(b"precious")
    proc = run_recipe(base_args(tiny_sana, shapes_data, out, tmp_path / "cache"), warm=True)
    _assert_clean_failure(proc, "already holds a finished run", "--overwrite_output_dir")
    assert (out / "pytorch_lora_weights.safetensors").read_bytes() == b"precious"


def test_unknown_family_lists_available():
    """An unknown family, asked of the registry or given as --family, is refused naming every registered one."""
    from dit_lora.registry import available, get_family

    with pytest.raises(UserError, match=r"Available families: ") as err:
        get_family("sdxl")
    with pytest.raises(UserError, match=r"--family is `sdxl`, which is not one of ") as parsed:
        parse_config(["--family", "sdxl", "--pretrained_model_name_or_path", "m", "--train_data_dir", "d"])
    for text in (str(err.value), str(parsed.value)):
        assert all(re.search(rf"\b{name}\b", text) for name in available()), text


def test_readme_links_the_generated_options_page_and_copies_no_table():
    """The options tables live in docs/reference/options.md (generated; tests/commands/test_docsite.py checks it is current):
    a copy in the README would go stale unchecked."""
    from helpers import ROOT
    from dit_lora.config.docs import HEADER

    readme = (ROOT / "README.md").read_text()
    assert "](docs/reference/options.md)" in readme and HEADER not in readme
    assert (ROOT / "docs" / "reference" / "options.md").is_file()
