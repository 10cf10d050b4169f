"""pipeline_files.py: small reads of a pipeline folder before any weight loads (configs, dtypes, pickles, errors)."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from safetensors.torch import save_file

from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    header_bytes,
    is_local,
    load_error,
    model_stamp,
    read_component_config,
    stored_dtype,
    weight_files,
)


def model(path, **kw) -> ModelOptions:
    """The run's model section (``cfg.model``), which the readers take."""
    return ModelOptions(pretrained_model_name_or_path=str(path), **kw)


def test_is_local(tmp_path):
    assert is_local(str(tmp_path)) and is_local("a/b/c") and is_local("model")
    assert not is_local("org/model") and not is_local("Efficient-Large-Model/Sana_600M_512px_diffusers")


def test_read_component_config_and_the_pipeline_folder_checks(tmp_path):
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text(json.dumps({"num_layers": 2}))
    assert read_component_config(model(tmp_path), "transformer") == {"num_layers": 2}
    assert read_component_config(model(tmp_path), "vae") is None
    with pytest.raises(UserError, match="has no model_index.json"):
        check_pipeline_folder(model(tmp_path), "Sana", "org/sana", "transformer/ and vae/")
    (tmp_path / "model_index.json").write_text("{}")
    check_pipeline_folder(model(tmp_path), "Sana", "org/sana", "transformer/")
    with pytest.raises(UserError, match="does not exist.*such as org/sana"):
        check_pipeline_folder(model(tmp_path / "missing"), "Sana", "org/sana", "transformer/")
    check_pipeline_folder(model("org/sana"), "Sana", "org/sana", "transformer/")  # a Hub id: checked when loading


def test_weight_files_pick_the_variant_or_the_main_files(tmp_path):
    for name in ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.fp16.safetensors",
                 "diffusion_pytorch_model.bf16-00001-of-00002.safetensors"):
        (tmp_path / name).write_bytes(b"")
    names = lambda files: [f.name for f in files]  # noqa: E731
    assert names(weight_files(tmp_path)) == ["diffusion_pytorch_model.safetensors"]
    assert names(weight_files(tmp_path, "fp16")) == ["diffusion_pytorch_model.fp16.safetensors"]
    assert names(weight_files(tmp_path, "bf16")) == ["diffusion_pytorch_model.bf16-00001-of-00002.safetensors"]
    assert len(weight_files(tmp_path, "int8")) == 3  # no such variant: every file


def test_header_bytes_and_stored_dtype_read_headers_only(tmp_path):
    (tmp_path / "transformer").mkdir()
    file = tmp_path / "transformer" / "diffusion_pytorch_model.safetensors"
    save_file({"a": torch.zeros(3, dtype=torch.bfloat16), "b": torch.zeros(2, dtype=torch.float32)}, str(file))
    assert header_bytes(file) == {"BF16": 6, "F32": 8}
    assert stored_dtype(model(tmp_path)) == "BF16,F32"
    save_file({"a": torch.zeros(3, dtype=torch.float16)}, str(file))
    assert stored_dtype(model(tmp_path)) == "F16"
    assert stored_dtype(model("org/model", variant="bf16")) == "BF16" and stored_dtype(model("org/model")) is None


def test_model_stamp_changes_when_weights_are_rewritten(tmp_path):
    (tmp_path / "transformer").mkdir()
    file = tmp_path / "transformer" / "m.safetensors"
    save_file({"a": torch.zeros(1)}, str(file))
    first = model_stamp(model(tmp_path), ("transformer",))
    assert first.startswith("transformer/m.safetensors:")
    save_file({"a": torch.zeros(4)}, str(file))
    os.utime(file, (time.time() + 5, time.time() + 5))
    assert model_stamp(model(tmp_path), ("transformer",)) != first
    assert model_stamp(model("org/model"), ("transformer",)) is None


def test_pickle_only_components_are_refused(tmp_path):
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "diffusion_pytorch_model.bin").write_bytes(b"")
    with pytest.raises(UserError, match=r"stores transformer/ weights only as pickle files.*safetensors files only"):
        check_safetensors(model(tmp_path), ("transformer",), "DiT")
    (tmp_path / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    check_safetensors(model(tmp_path), ("transformer",), "DiT")


def test_load_error_names_the_cause_that_applies(tmp_path, monkeypatch):
    from huggingface_hub.errors import RepositoryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert "A package the pipeline needs is missing" in str(load_error("Sana", model(tmp_path), ImportError("x")))
    assert "incomplete or not a diffusers-format Sana pipeline" in str(load_error("Sana", model(tmp_path), OSError("x")))
    try:
        try:
            missing = RepositoryNotFoundError.__new__(RepositoryNotFoundError)  # no HTTP response to build it from
            Exception.__init__(missing, "404")
            raise missing
        except RepositoryNotFoundError as inner:
            raise OSError("org/model is not a valid model identifier") from inner
    except OSError as err:
        assert "not accessible" in str(load_error("Sana", model("org/model"), err))
    missing_variant = OSError("no file named diffusion_pytorch_model.fp16.safetensors found")
    assert "has no `fp16` variant" in str(load_error("Sana", model("org/model", variant="fp16"), missing_variant))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "not in the Hub cache" in str(load_error("Sana", model("org/model"), OSError("x")))


def test_read_once_reads_again_only_when_a_config_file_changes(tmp_path):
    import os

    from dit_lora.config import TrainConfig
    from dit_lora.modelfiles.pipeline_files import read_once

    (tmp_path / "model_index.json").write_text("{}")
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tmp_path), train_data_dir="x")
    calls, cache = [], {}
    read = lambda c: calls.append(1) or len(calls)  # noqa: E731
    assert read_once(cache, cfg.model, ("model_index.json",), read) == 1
    assert read_once(cache, cfg.model, ("model_index.json",), read) == 1  # memoised
    stat = os.stat(tmp_path / "model_index.json")
    os.utime(tmp_path / "model_index.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert read_once(cache, cfg.model, ("model_index.json",), read) == 2  # a rebuilt model is read again


def test_an_unreachable_hub_is_asked_once_then_only_the_cache(monkeypatch):
    """Offline, each small config read used to wait through huggingface_hub's retries (dit-lora plan of a catalogued
    Wan id: 4.5 minutes); after the first connection failure the reads use the local cache only."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from dit_lora.modelfiles import pipeline_files
    from dit_lora.config import TrainConfig

    calls = []

    def download(repo, filename, revision=None, local_files_only=False):
        calls.append(local_files_only)
        raise LocalEntryNotFoundError("no connection")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(pipeline_files, "_HUB_UNREACHABLE", False)
    monkeypatch.setattr(pipeline_files, "_HUB_PROBED", True)  # the probe answered; the download then failed
    cfg = TrainConfig.for_family("wan", pretrained_model_name_or_path="Wan-AI/Wan2.1-T2V-14B-Diffusers",
                                 train_data_dir="x")
    assert pipeline_files.read_component_config(cfg.model, "transformer") is None
    assert pipeline_files.read_component_config(cfg.model, "vae") is None
    assert calls == [False, True]


@pytest.mark.parametrize("damage", ['{"flow_shift": 3.0,', "<<<<<<< HEAD\n{}\n", b"\xff\xfe{}"])
def test_a_damaged_config_is_one_paragraph_naming_it_never_a_traceback_or_missing(tmp_path, monkeypatch, damage):
    """A damaged small config used to end in a JSONDecodeError traceback (local folder), or was read as missing
    (Hub cache): the run then took the defaults of another model (flow shift 1 instead of the file's)."""
    import huggingface_hub

    from dit_lora.modelfiles import pipeline_files

    file = tmp_path / "scheduler" / "scheduler_config.json"
    file.parent.mkdir()
    file.write_bytes(damage.encode() if isinstance(damage, str) else damage)
    with pytest.raises(UserError, match=r"scheduler_config\.json is not valid JSON .*damaged.*Restore it") as err:
        read_component_config(model(tmp_path), "scheduler", "scheduler_config.json")
    assert str(file) in str(err.value) and err.value.__cause__ is None

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, **kw: str(file))
    monkeypatch.setattr(pipeline_files, "_HUB_UNREACHABLE", False)
    monkeypatch.setattr(pipeline_files, "_HUB_PROBED", True)
    with pytest.raises(UserError, match=r"scheduler/scheduler_config\.json of org/model in the Hub cache .*delete"):
        read_component_config(model("org/model"), "scheduler", "scheduler_config.json")


@pytest.mark.parametrize("offline", [False, True])
def test_an_unreachable_hub_is_found_by_one_request_without_retries(monkeypatch, capsys, offline):
    """Issue 76: an offline `dit-lora plan HUB_ID` spent about 23 s in huggingface_hub's five retries before the
    catalogue. One request without retries (none at all under HF_HUB_OFFLINE) decides, and every read then takes the
    cache, said once."""
    import huggingface_hub
    import huggingface_hub.utils
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    from dit_lora.modelfiles import pipeline_files

    probes, reads = [], []

    class Unreachable:
        def head(self, url, timeout):
            probes.append((url, timeout))
            raise OSError("[Errno -2] Name or service not known")

    def download(repo, filename, revision=None, local_files_only=False):
        reads.append(local_files_only)
        raise LocalEntryNotFoundError("not in the cache")

    monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: Unreachable())
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(pipeline_files, "_HUB_UNREACHABLE", False)
    monkeypatch.setattr(pipeline_files, "_HUB_PROBED", False)
    for sub in ("transformer", "vae", "scheduler"):
        assert read_component_config(model("org/model"), sub) is None
    assert reads == [True, True, True]  # the cache only, from the first read on
    assert probes == ([] if offline else [(constants.ENDPOINT, constants.HF_HUB_ETAG_TIMEOUT)])
    said = capsys.readouterr().out + capsys.readouterr().err
    assert said.count("gave no answer within") == (0 if offline else 1)


def test_a_reachable_hub_is_asked_as_before(monkeypatch, tmp_path):
    import huggingface_hub
    import huggingface_hub.utils

    from dit_lora.modelfiles import pipeline_files

    (tmp_path / "config.json").write_text('{"num_layers": 2}')
    reads = []

    def download(repo, name, revision=None, local_files_only=False):
        reads.append(local_files_only)
        return str(tmp_path / "config.json")

    monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: type("S", (), {"head": lambda s, u, timeout: 200})())
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(pipeline_files, "_HUB_UNREACHABLE", False)
    monkeypatch.setattr(pipeline_files, "_HUB_PROBED", False)
    assert read_component_config(model("org/model"), "transformer") == {"num_layers": 2}
    assert reads == [False]  # asked online
