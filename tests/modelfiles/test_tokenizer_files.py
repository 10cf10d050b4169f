"""A tokenizer that needs a package the machine lacks is named before anything loads: by the recipe's checks,
by ``dit-lora doctor --model``, and by the load error (never as an 'offline' or 'tiktoken' problem)."""

from __future__ import annotations

import pytest
from real_layout import block_packages, t5_tokenizer_folder, write_configs

from dit_lora.commands import doctor
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.tokenizer_files import requirements_for_files
from dit_lora.setup.tokenizer_check import check_tokenizer_packages


def test_requirements_follow_the_files():
    assert requirements_for_files(["tokenizer.json", "tokenizer.model"], "m/tokenizer") == []
    needs = requirements_for_files(["spiece.model", "tokenizer_config.json"], "m/tokenizer")
    assert [p for p, _ in needs] == ["sentencepiece", "protobuf"] and "m/tokenizer/spiece.model" in needs[0][1]
    assert requirements_for_files(["vocab.json", "merges.txt"], "m") == []


def test_the_spiece_only_cogvideox_tokenizer_loads_with_the_installed_packages(tmp_path):
    from transformers import AutoTokenizer

    folder = t5_tokenizer_folder(tmp_path / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("a red square", padding="max_length", max_length=226, truncation=True).input_ids
    assert len(ids) == 226 and ids[0] != tokenizer.pad_token_id
    check_tokenizer_packages(str(tmp_path), "tokenizer")  # nothing missing here: no error


@pytest.mark.parametrize("blocked", [("sentencepiece",), ("google",), ("sentencepiece", "google")])
def test_a_missing_package_is_named_by_the_check_and_the_doctor(monkeypatch, tmp_path, blocked):
    model = write_configs("THUDM/CogVideoX-5b", tmp_path / "cogvideox")
    t5_tokenizer_folder(model / "tokenizer")
    block_packages(monkeypatch, *blocked)
    named = {"sentencepiece": "sentencepiece", "google": "protobuf"}
    with pytest.raises(UserError) as err:
        check_tokenizer_packages(str(model), "tokenizer")
    text = str(err.value)
    for package in blocked:
        assert named[package] in text
    assert "pip install" in text and "offline" not in text and "tiktoken" not in text
    (check,) = [c for c in doctor.model_checks(str(model)) if c.name.startswith("tokenizer")]
    assert check.status == doctor.BLOCK and all(named[p] in check.value + check.message for p in blocked)


def test_the_recipe_stops_before_loading_when_the_tokenizer_package_is_missing(monkeypatch, tmp_path):
    """The CogVideoX family's checks (run before any weight loads) raise the paragraph."""
    from dit_lora.config.parser import parse_config
    from dit_lora.registry import get_family

    model = write_configs("THUDM/CogVideoX-2b", tmp_path / "cogvideox")
    t5_tokenizer_folder(model / "tokenizer")
    cfg = parse_config(["--pretrained_model_name_or_path", str(model), "--train_data_dir", str(tmp_path),
                        "--family", "cogvideox"])
    get_family("cogvideox").model.validate_config(cfg)  # the packages are installed here
    block_packages(monkeypatch, "sentencepiece")
    with pytest.raises(UserError, match=r"needs sentencepiece.*pip install sentencepiece"):
        get_family("cogvideox").model.validate_config(cfg)


def test_doctor_model_on_a_healthy_folder_and_on_an_unknown_id(tmp_path, monkeypatch):
    model = write_configs("Efficient-Large-Model/Sana_600M_1024px_diffusers", tmp_path / "sana")
    (model / "tokenizer").mkdir()
    (model / "tokenizer" / "tokenizer.json").write_text("{}")
    checks = doctor.model_checks(str(model))
    assert [c.status for c in checks] == [doctor.OK]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    (unknown,) = doctor.model_checks("someone/not-catalogued")
    assert unknown.status == doctor.WARN and "not catalogued" in unknown.message and "offline" not in unknown.message


def test_load_error_names_a_missing_package_not_the_network():
    from dit_lora.config import TrainConfig
    from dit_lora.modelfiles.pipeline_files import load_error

    cfg = TrainConfig(pretrained_model_name_or_path="THUDM/CogVideoX-5b")
    err = load_error("CogVideoX", cfg.model, ImportError("T5Tokenizer requires the SentencePiece library. pip install sentencepiece"))
    assert "package the pipeline needs is missing" in str(err) and "offline" not in str(err)
    err = load_error("DiT", TrainConfig(pretrained_model_name_or_path="facebook/DiT-XL-2-256").model,
                     OSError("Error no file named diffusion_pytorch_model.safetensors found in directory x"))
    assert "safetensors files only" in str(err) and "refs/pr/1" in str(err)


def test_load_error_reads_the_wording_diffusers_uses_and_wrapped_hub_errors():
    from huggingface_hub.errors import RepositoryNotFoundError

    from dit_lora.config import TrainConfig
    from dit_lora.modelfiles.pipeline_files import load_error

    hub = TrainConfig(pretrained_model_name_or_path="facebook/DiT-XL-2-256")
    err = load_error("DiT", hub.model, OSError("facebook/DiT-XL-2-256 does not appear to have a file named "
                                         "diffusion_pytorch_model.safetensors."))
    assert "safetensors files only" in str(err) and "refs/pr/1" in str(err)
    variant = TrainConfig(pretrained_model_name_or_path="facebook/DiT-XL-2-256", variant="bf16")
    err = load_error("DiT", variant.model, OSError("Error no file named diffusion_pytorch_model.bf16.safetensors found"))
    assert "no `bf16` variant" in str(err) and "pickle" not in str(err)
    try:  # diffusers re-raises huggingface_hub's error as a plain OSError
        try:
            missing = RepositoryNotFoundError.__new__(RepositoryNotFoundError)  # no HTTP response to build it from
            missing.args = ("404 Client Error: Repository Not Found",)
            raise missing
        except RepositoryNotFoundError as inner:
            raise OSError("someone/typo is not a local folder and is not a valid model identifier") from inner
    except OSError as wrapped:
        err = load_error("Sana", TrainConfig(pretrained_model_name_or_path="someone/typo").model, wrapped)
    assert "not accessible" in str(err) and "offline" not in str(err)
