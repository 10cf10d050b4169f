"""plan/trace_cache.py: a plan of the same inputs takes its step traces from the cache; any input that shapes a
trace (an option, a config file's content, a folder's files, the code) is a new entry; the cache never stops a
plan."""

import json

import pytest
from plan_readers import stand_in_configs

from dit_lora.config import TrainConfig
from dit_lora.plan import make_plan, trace_cache, tracing
from dit_lora.registry import get_family

HUB_ID = "facebook/DiT-XL-2-256"


@pytest.fixture
def dit(monkeypatch, tmp_path):
    """DiT-XL-2-256's published configs two narrow blocks deep, read as a model folder is; the cache under
    ``tmp_path``; returns the blocks' config (edit it to change what the reader gives) and the traces made."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("DIT_LORA_PLAN_CACHE", raising=False)
    blocks = stand_in_configs(monkeypatch, HUB_ID, {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16})
    made, real = [], tracing.traces
    monkeypatch.setattr(tracing, "traces", lambda *a, **k: made.append(a[4]) or real(*a, **k))
    return blocks, made


def _plan(cache=True, **values):
    cfg = TrainConfig(family="dit", pretrained_model_name_or_path=HUB_ID, **{"resolution": 64, **values})
    return make_plan(cfg, get_family("dit"), device="cuda", both_settings=False, cache=cache)


def _steps(plan):
    return [(s.bucket, s.checkpointing, s.activation_bytes, s.flops, s.offloaded_bytes) for s in plan.steps]


def test_the_second_plan_of_the_same_inputs_takes_the_kept_traces(dit):
    _, made = dit
    first = _plan()
    assert len(made) == 1 and len(list(trace_cache.cache_dir().glob("*.json"))) == 1
    second = _plan()
    assert len(made) == 1, "the kept traces were not used"
    assert _steps(second) == _steps(first) and second.peak_memory_bytes == first.peak_memory_bytes


def test_options_that_never_reach_a_trace_share_an_entry_and_the_others_do_not(dit, tmp_path):
    _, made = dit
    _plan(output_dir=str(tmp_path / "a"), seed=1, learning_rate=1e-4, max_train_steps=10)
    _plan(output_dir=str(tmp_path / "b"), seed=2, learning_rate=3e-4, max_train_steps=99)
    assert len(made) == 1
    _plan(resolution=128)
    _plan(rank=8)
    _plan(gradient_checkpointing=True)
    assert len(made) == 4


def test_a_changed_config_file_is_traced_again(dit):
    blocks, made = dit
    first = _plan()
    blocks["num_attention_heads"] = 4  # what the reader gives changes, the option values do not
    second = _plan()
    assert len(made) == 2 and _steps(second) != _steps(first)


def test_a_local_folder_is_keyed_by_its_files_not_its_path(tmp_path):
    from types import SimpleNamespace

    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        (folder / "transformer").mkdir(parents=True)
        (folder / "model_index.json").write_text('{"_class_name": "DiTPipeline"}')
        (folder / "transformer" / "config.json").write_text('{"num_layers": 2}')
    (two / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"weights are not keyed")
    identity = trace_cache._model_identity
    assert identity(SimpleNamespace(pretrained_model_name_or_path=one)) == identity(
        SimpleNamespace(pretrained_model_name_or_path=two))
    (two / "transformer" / "config.json").write_text('{"num_layers": 3}')
    assert identity(SimpleNamespace(pretrained_model_name_or_path=one)) != identity(
        SimpleNamespace(pretrained_model_name_or_path=two))
    hub = SimpleNamespace(pretrained_model_name_or_path=HUB_ID, revision=None)
    assert identity(hub) == [HUB_ID, None, None]  # not downloaded


def test_a_hub_id_is_keyed_by_the_snapshot_its_cache_holds(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    hub = SimpleNamespace(pretrained_model_name_or_path=HUB_ID, revision=None)
    repo = tmp_path / "hub" / ("models--" + HUB_ID.replace("/", "--"))
    for commit in ("a" * 40, "b" * 40):  # a download, then a newer one: the cache's main ref moves
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "model_index.json").write_text("{}")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
        assert trace_cache._model_identity(hub) == [HUB_ID, None, commit]


def test_a_damaged_entry_is_traced_again_and_rewritten(dit):
    _, made = dit
    first = _plan()
    (entry,) = trace_cache.cache_dir().glob("*.json")
    entry.write_text('{"version": 1, "read": {}, "result": {"steps": [{"bucket": 3}]}}')
    second = _plan()
    assert len(made) == 2 and _steps(second) == _steps(first)
    assert json.loads(entry.read_text())["result"]["steps"][0]["bucket"] == first.steps[0].bucket


def test_an_unwritable_cache_never_stops_a_plan(dit, tmp_path, monkeypatch):
    _, made = dit
    (tmp_path / "hf").write_text("a file where the cache's folder would go")
    first, second = _plan(), _plan()
    assert len(made) == 2 and _steps(first) == _steps(second)


def test_off_without_the_flag_or_with_the_variable(dit, monkeypatch):
    _, made = dit
    _plan(cache=False)
    assert not trace_cache.cache_dir().exists()
    monkeypatch.setenv("DIT_LORA_PLAN_CACHE", "0")
    _plan(), _plan()
    assert len(made) == 3 and not trace_cache.cache_dir().exists()


def test_the_code_digest_covers_the_package_and_the_libraries(monkeypatch):
    trace_cache.code_digest.cache_clear()
    before = trace_cache.code_digest()
    monkeypatch.setattr(trace_cache.metadata, "version", lambda name: "0.0.0")
    trace_cache.code_digest.cache_clear()
    try:
        assert trace_cache.code_digest() != before
    finally:
        monkeypatch.undo()
        trace_cache.code_digest.cache_clear()
