"""A Hub id as a local folder (dit_lora/modelfiles/hub_snapshot.py): the cache's snapshot, only the files loading
reads, the commit pinned, and one paragraph for every way the snapshot cannot be had."""

from __future__ import annotations

import pytest
import torch
from huggingface_hub import errors as hub_errors
from safetensors.torch import save_file

from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.modelfiles import hub_snapshot
from dit_lora.modelfiles.hub_snapshot import model_snapshot
from hub_cache import COMMIT, put_in_cache, use_cache


def _folder(tmp_path, weights: bool):
    folder = tmp_path / "made"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llava_next_video"}')
    if weights:
        save_file({"x": torch.zeros(1)}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    use_cache(monkeypatch, tmp_path / "hub")
    return tmp_path / "hub"


def _model(repo: str = "tiny-org/tiny-vlm", revision: str | None = None) -> ModelOptions:
    return ModelOptions(family="llava_next_video", pretrained_model_name_or_path=repo, revision=revision)


def test_a_cached_hub_id_is_its_snapshot_folder_offline(tmp_path, offline_cache):
    snapshot = put_in_cache(offline_cache, "tiny-org/tiny-vlm", _folder(tmp_path, weights=True))
    assert model_snapshot(_model(), "video LLM", weights=True) == snapshot
    assert snapshot.name == COMMIT


def test_a_local_folder_is_itself(tmp_path, offline_cache):
    folder = _folder(tmp_path, weights=True)
    assert model_snapshot(_model(str(folder)), "video LLM", weights=True) == folder


def test_offline_and_not_cached_is_one_paragraph_with_the_download(offline_cache):
    with pytest.raises(UserError) as caught:
        model_snapshot(_model("tiny-org/absent", revision="v1"), "video LLM", weights=True)
    text = str(caught.value)
    assert "`tiny-org/absent` at revision v1" in text and "HF_HUB_OFFLINE=1" in text
    assert "hf download tiny-org/absent --revision v1" in text and "--local-dir DIR" in text
    assert "huggingface-cli" not in text and str(offline_cache) in text


def test_offline_snapshot_without_its_weights_is_refused_before_loading(tmp_path, offline_cache):
    snapshot = put_in_cache(offline_cache, "tiny-org/tiny-vlm", _folder(tmp_path, weights=False))
    assert model_snapshot(_model(), "video LLM", weights=False) == snapshot  # check-data and plan: configs only
    with pytest.raises(UserError, match="without its weights"):
        model_snapshot(_model(), "video LLM", weights=True)


def _hub_error(cls, message: str) -> Exception:
    # huggingface_hub's HTTP errors want a live response; what the mapping reads is the class and the message
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    return err


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (_hub_error(hub_errors.GatedRepoError, "403 Client Error: gated"), "accept its license"),
        (_hub_error(hub_errors.RevisionNotFoundError, "404 revision"), "--revision v9 is not a branch"),
        (_hub_error(hub_errors.RepositoryNotFoundError, "404 repo"), "There is no such repo"),
        (hub_errors.LocalEntryNotFoundError("connection error and no cached snapshot"), "could not be reached"),
    ],
)
def test_each_hub_failure_is_one_paragraph_naming_cause_and_fix(monkeypatch, error, says):
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_printed")
    monkeypatch.setattr(hub_snapshot, "_RESOLVED", {})

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(UserError) as caught:
        model_snapshot(_model("tiny-org/tiny-vlm", revision="v9"), "video LLM", weights=False)
    text = str(caught.value)
    assert says in text and "`tiny-org/tiny-vlm`" in text and "\n" not in text
    assert "hf_secret_never_printed" not in text


def test_only_what_loading_reads_comes_down_and_the_weights_come_from_the_same_commit(monkeypatch, tmp_path):
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub_snapshot, "_RESOLVED", {})
    snapshot = _folder(tmp_path, weights=True).rename(tmp_path / COMMIT)
    calls = []

    def download(repo_id, **kwargs):
        calls.append(kwargs)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    model_snapshot(_model(), "video LLM", weights=False)  # check-data, then the run's weights
    model_snapshot(_model(), "video LLM", weights=True)
    model_snapshot(_model(), "video LLM", weights=True)  # the model again (the adapter's reload): no new request
    assert [c["revision"] for c in calls] == [None, COMMIT]
    assert not any(c["local_files_only"] for c in calls)
    patterns = calls[1]["allow_patterns"]
    assert "*.safetensors" in patterns and "*.safetensors" not in calls[0]["allow_patterns"]
    assert not any(p.endswith((".bin", ".pt", ".pth", ".py", "*")) and p != "*.safetensors" for p in patterns)
