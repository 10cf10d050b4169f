"""`dit_lora.output.hub.push_adapter` and `dit-lora push` against a local Hub stand-in.

Proves: only the allow-listed artefacts leave the machine (byte-exact), the token is sent as
the Authorization header and never appears in any output, log record or error message (also
when the server echoes it back in an error), and the refusals (no adapter, NaN weights, no
token, offline) happen before any network request.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import huggingface_hub.constants as hf_constants
from dit_lora.core.errors import UserError
from dit_lora.output.hub import push_adapter
from helpers import ROOT
from hub_standin import HubStandIn

TOKEN = "hf_StandInSecretToken0123456789"
REPO_ID = "standin-user/sana-lora"

ALLOWED = {
    "pytorch_lora_weights.safetensors",
    "dit_lora_backbone.safetensors",
    "README.md",
    "train_summary.json",
    "loss_curve.png",
    "samples/a.png",
    "samples/b.jpg",
    "samples/c.mp4",
}
DECOYS = [
    "checkpoint-10/optimizer.bin",
    "checkpoint-10/pytorch_lora_weights.safetensors",
    "checkpoint-10/scheduler.bin",
    "checkpoint-10/random_states_0.pkl",
    "cache/latents/000.pt",
    ".cache/huggingface/upload/README.md.metadata",
    "logs/events.out.tfevents.1.host",
    "samples/notes.txt",
    "samples/nested/d.png",  # only files directly in samples/ are published
    "config_resolved.yaml",
    "README.md.bak",
]


def _write_adapter(path: Path, value: float = 0.5) -> None:
    save_file({"transformer.blocks.0.attn.to_q.lora_A.weight": torch.full((4, 8), value),
               "transformer.blocks.0.attn.to_q.lora_B.weight": torch.zeros(8, 4)}, str(path))


@pytest.fixture
def output_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    (out / "samples").mkdir(parents=True)
    _write_adapter(out / "pytorch_lora_weights.safetensors")
    save_file({"transformer.norm.weight": torch.ones(8, dtype=torch.bfloat16)},
              str(out / "dit_lora_backbone.safetensors"))
    (out / "README.md").write_text("---\nlicense: apache-2.0\nbase_model: Efficient-Large-Model/Sana\n---\n# LoRA\n")
    (out / "train_summary.json").write_text('{"final_loss": 0.1}')
    (out / "loss_curve.png").write_bytes(b"\x89PNG loss")
    (out / "samples" / "a.png").write_bytes(b"\x89PNG sample a")
    (out / "samples" / "b.jpg").write_bytes(b"\xff\xd8 sample b")
    (out / "samples" / "c.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42")
    for decoy in DECOYS:
        (out / decoy).parent.mkdir(parents=True, exist_ok=True)
        (out / decoy).write_bytes(b"must not be uploaded")
    return out


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A running stand-in with huggingface_hub pointed at it and no ambient credentials."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(hf_constants, "AGENT_HARNESSES_PATH", str(tmp_path / "hf_home" / "harnesses.json"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    with HubStandIn(token=TOKEN) as server:
        # HfApi() reads constants.ENDPOINT when it is constructed, i.e. inside push_adapter.
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.url)
        yield server


@pytest.fixture
def debug_logs(caplog):
    """Capture huggingface_hub / HTTP client records at DEBUG (their most talkative level)."""
    for name in ("huggingface_hub", "httpx2", "httpcore2", "httpx", "httpcore", "dit_lora"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def _assert_no_token(*texts: str) -> None:
    for text in texts:
        assert TOKEN not in text
        assert TOKEN[3:] not in text  # not even without the hf_ prefix


@pytest.mark.parametrize("disable_xet", [False, True], ids=["xet-pipeline", "legacy-commit"])
def test_push_uploads_exactly_the_allowed_files(hub, output_dir, debug_logs, capsys, monkeypatch, disable_xet):
    # hf_xet installed -> upload_folder uses the streamed Xet pipeline; without it, one create_commit.
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", disable_xet)
    url = push_adapter(output_dir, REPO_ID, token=TOKEN, commit_message="first adapter")

    assert url == f"{hub.url}/{REPO_ID}"
    assert set(hub.files) == ALLOWED
    for name in ALLOWED:
        assert hub.files[name] == (output_dir / name).read_bytes(), name
    assert hub.commits and hub.commits[0]["summary"] == "first adapter"

    api_calls = [r for r in hub.requests if r.path != "/api/agent-harnesses"]
    kinds = [r.path for r in api_calls]
    assert "/api/repos/create" in kinds and f"/api/models/{REPO_ID}/commit/main" in kinds
    assert not any("xet" in p or "lfs" in p for p in hub.paths()), hub.paths()
    for request in api_calls:
        assert request.headers.get("authorization") == f"Bearer {TOKEN}", request.path
    # A new repo keeps the owner's default visibility unless --private was asked for.
    create = next(r for r in api_calls if r.path == "/api/repos/create")
    assert create.body.get("visibility") in (None, "public") and create.body["name"] == "sana-lora"

    out = capsys.readouterr()
    _assert_no_token(out.out, out.err, debug_logs.text, *(r.getMessage() for r in debug_logs.records))
    assert "samples/a.png" in out.out  # the file list is shown to the user


def test_private_flag_and_token_from_environment(hub, output_dir, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    push_adapter(output_dir, REPO_ID, private=True, log=lambda _msg: None)
    create = next(r for r in hub.requests if r.path == "/api/repos/create")
    assert create.headers["authorization"] == f"Bearer {TOKEN}"
    assert create.body["visibility"] == "private"
    _assert_no_token(*capsys.readouterr())


@pytest.mark.parametrize(
    "kind,status",
    [("create", 500), ("preupload", 403), ("commit", 401)],
)
def test_server_errors_are_scrubbed_user_errors(hub, output_dir, debug_logs, capsys, kind, status):
    # The stand-in echoes the Authorization header in its error body, the worst case for a leak.
    hub.fail[kind] = (status, "rejected credentials {auth} for this request")
    with pytest.raises(UserError) as info:
        push_adapter(output_dir, REPO_ID, token=TOKEN)
    message = str(info.value)
    assert f"HTTP {status}" in message and REPO_ID in message
    assert "\n" not in message and "Traceback" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert hub.files == {}
    out = capsys.readouterr()
    _assert_no_token(message, out.out, out.err, debug_logs.text, *(r.getMessage() for r in debug_logs.records))


def test_missing_adapter_is_refused_before_any_request(hub, output_dir):
    (output_dir / "pytorch_lora_weights.safetensors").unlink()
    with pytest.raises(UserError, match="no pytorch_lora_weights.safetensors in"):
        push_adapter(output_dir, REPO_ID, token=TOKEN)
    with pytest.raises(UserError, match="does not exist"):
        push_adapter(output_dir / "nope", REPO_ID, token=TOKEN)
    assert hub.requests == []


@pytest.mark.parametrize("filename,bad", [("pytorch_lora_weights.safetensors", float("nan")),
                                          ("dit_lora_backbone.safetensors", float("inf"))])
def test_non_finite_weights_are_refused(hub, output_dir, filename, bad):
    _write_adapter(output_dir / filename, value=bad)
    with pytest.raises(UserError, match="NaN/Inf") as info:
        push_adapter(output_dir, REPO_ID, token=TOKEN)
    assert "lora_A" in str(info.value) and filename in str(info.value)
    assert hub.requests == [] and hub.files == {}


def test_corrupt_adapter_is_refused(hub, output_dir):
    (output_dir / "pytorch_lora_weights.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="cannot read"):
        push_adapter(output_dir, REPO_ID, token=TOKEN)
    assert hub.requests == []


def test_no_token_is_a_clear_error(hub, output_dir):
    with pytest.raises(UserError) as info:
        push_adapter(output_dir, REPO_ID)
    assert "hf auth login" in str(info.value) and "HF_TOKEN" in str(info.value)
    assert hub.requests == []


def test_offline_mode_and_bad_repo_id(hub, output_dir, monkeypatch):
    with pytest.raises(UserError, match="not a valid repo id"):
        push_adapter(output_dir, "a/b/c", token=TOKEN)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match="HF_HUB_OFFLINE"):
        push_adapter(output_dir, REPO_ID, token=TOKEN)
    assert hub.requests == []


#: what the CLI child inherits from the worker's environment; everything else it gets is set below. Copying the whole
#: environment let a full test run's state in: proxies (httpx honours HTTP(S)_PROXY / ALL_PROXY and ~/.netrc),
#: TRANSFORMERS_OFFLINE (huggingface_hub reads it as HF_HUB_OFFLINE), HUGGINGFACE_HUB_CACHE, XDG_CACHE_HOME and
#: whatever earlier tests in the same worker left in os.environ.
_CLI_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT", "TMPDIR", "OMP_NUM_THREADS")


def _run_cli(args: list[str], hub: HubStandIn, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: os.environ[k] for k in _CLI_ENV_KEEP if k in os.environ}
    home = tmp_path / "hf_home"
    # huggingface_hub fetches its agent-harness registry (telemetry) with a 3 s timeout unless HF_HOME holds a
    # copy younger than a day; a stand-in starved of CPU answers late, and under HF_DEBUG the swallowed timeout
    # is logged with a traceback. A fresh copy means that request is never made.
    home.mkdir(exist_ok=True)
    (home / ".agent_harnesses.json").write_text('{"standardEnvVars": [], "harnesses": {}}')
    env.update(
        HOME=str(tmp_path),  # no ~/.netrc, ~/.cache or token of the user's
        XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
        HF_ENDPOINT=hub.url,  # read by huggingface_hub.constants at import time
        HF_TOKEN=TOKEN,
        HF_HOME=str(home),
        HF_HUB_OFFLINE="0",  # conftest sets 1 for the test process; the push needs the (stand-in) Hub
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_DEBUG="1",  # most verbose huggingface_hub logging: still must not show the token
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    # 300 s as run_recipe: the CLI starts in ~10 s on an idle 2-core machine, much longer under a full run's load.
    return subprocess.run([sys.executable, "-m", "dit_lora.commands.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def _error_paragraph(stderr: str) -> str:
    """The CLI's own closing paragraph: from the last line that starts with ``error: `` (HF_DEBUG log lines before it
    may contain the same words, and how many there are depends on timing: a slow upload logs progress)."""
    starts = [m.start() for m in re.finditer(r"^error: ", stderr, flags=re.MULTILINE)]
    assert starts, stderr
    return stderr[starts[-1]:]


@pytest.mark.slow
def test_cli_push_success_and_scrubbed_error(hub, output_dir, tmp_path):
    # As a loaded CI machine does: the registry would answer after its client's 3 s timeout (it once put a
    # huggingface_hub debug traceback into the error output). The CLI runs must not ask for it at all.
    hub.delay["agent-harnesses"] = 5.0
    ok = _run_cli(["push", str(output_dir), "--hub_model_id", REPO_ID, "--commit_message", "cli push"], hub, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().splitlines()[-1] == f"{hub.url}/{REPO_ID}"
    assert set(hub.files) == ALLOWED and hub.commits[-1]["summary"] == "cli push"
    _assert_no_token(ok.stdout, ok.stderr)

    hub.files.clear()
    hub.fail["commit"] = (401, "Invalid token: {auth}")
    bad = _run_cli(["push", str(output_dir), "--hub_model_id", REPO_ID], hub, tmp_path)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    error = _error_paragraph(bad.stderr)
    assert "\n\n" not in error.strip()  # one paragraph (format_error wraps it at 100 columns)
    flat = " ".join(error.split())
    assert "HTTP 401" in flat and "hf auth login" in flat and REPO_ID in flat
    _assert_no_token(bad.stdout, bad.stderr)
    assert hub.files == {}
    assert not [r for r in hub.requests if r.path == "/api/agent-harnesses"]


def test_a_run_with_an_adapter_index_publishes_every_file_it_lists_and_its_exports(tmp_path):
    """Wan A14B writes one LoRA file per expert, the index and ComfyUI files: all are published (a plain list of
    standard names left the low-noise expert behind); a user's own .safetensors file is not."""
    import json

    from dit_lora.output.export import export_metadata
    from dit_lora.output.hub import select_files

    low = "pytorch_lora_weights_low_noise.safetensors"
    save_file({"a": torch.zeros(1)}, str(tmp_path / "pytorch_lora_weights.safetensors"))
    save_file({"a": torch.zeros(1)}, str(tmp_path / low))
    save_file({"a": torch.zeros(1)}, str(tmp_path / "x_comfyui.safetensors"), metadata=export_metadata("comfyui", "x"))
    save_file({"a": torch.zeros(1)}, str(tmp_path / "mine.safetensors"))
    (tmp_path / "dit_lora_adapter_files.json").write_text(json.dumps({"files": [
        {"file": "pytorch_lora_weights.safetensors", "label": "high", "load_kwargs": {}},
        {"file": low, "label": "low", "load_kwargs": {"load_into_transformer_2": True}}]}))
    files = select_files(tmp_path)
    assert {"pytorch_lora_weights.safetensors", low, "dit_lora_adapter_files.json", "x_comfyui.safetensors"} <= set(files)
    assert "mine.safetensors" not in files


def _finished_run(tmp_path: Path, base: str, entry: str | None, differences: tuple[str, ...] = (), **options) -> Path:
    """A run folder whose card and summary a finished Sana run wrote from the local base folder ``base``."""
    import json

    from dit_lora.config import TrainConfig
    from dit_lora.output.report import config_dict, write_model_card
    from dit_lora.registry import get_spec

    out = tmp_path / "run"
    out.mkdir()
    _write_adapter(out / "pytorch_lora_weights.safetensors")
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path=base, output_dir=str(out),
                                 validation_prompt="a red circle", **options)
    summary = {"family": "sana", "config": config_dict(cfg), "samples": [], "steps": 6,
               "defaults": {"catalogue_entry": entry, "differences": list(differences), "applied": {}, "user_set": {}}}
    (out / "train_summary.json").write_text(json.dumps(summary))
    write_model_card(get_spec("sana"), cfg, out, summary, [])
    return out


@pytest.mark.parametrize("entry", ["Efficient-Large-Model/Sana_600M_512px_diffusers", None], ids=["catalogued", "own"])
def test_the_pushed_card_loads_from_the_repo_and_names_the_base_by_its_hub_id(hub, tmp_path, monkeypatch, entry):
    """`dit-lora push`'s card is written for the repo: the snippet loads the adapter from it (the file named, so the
    Hub cache serves it offline too) and the base by the Hub id of the published checkpoint its configs matched, and
    no path of the trainer's disk is in it; a base no published checkpoint matches is said plainly. The local card
    stays the one that runs on this machine."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    base = str(tmp_path / "models" / "my-sana")
    out = _finished_run(tmp_path, base, entry)
    local = (out / "README.md").read_text()
    assert str(out.resolve()) in local and f'base = "{base}"' in local  # runs here, as written
    lines = []
    push_adapter(out, REPO_ID, log=lines.append)
    pushed = hub.files["README.md"].decode()
    assert (out / "README.md").read_text() == local  # the user's folder unchanged
    assert str(tmp_path) not in pushed and str(out.resolve()) not in pushed
    assert f'pipe.load_lora_weights("{REPO_ID}", weight_name="pytorch_lora_weights.safetensors")' in pushed
    if entry:
        assert f'base = "{entry}"' in pushed and f"base_model: {entry}" in pushed
        assert f"read from a local folder (`my-sana`) whose configs match the published `{entry}`" in pushed
    else:
        assert "base_model:" not in pushed and 'base = "my-sana"' in pushed
        assert "matches no published checkpoint dit-lora knows: the snippet loads it as `my-sana`" in pushed
    assert any(f"loads the adapter from {REPO_ID}" in line for line in lines)


def test_the_pushed_card_of_a_reduced_copy_names_no_published_base(hub, tmp_path, monkeypatch):
    """A folder with a published checkpoint's configs but other depths (the demos' tiny models: the catalogue entry
    matched, its depths not) is not that checkpoint: the pushed card names it by its folder, as one of no entry."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    entry = "Efficient-Large-Model/Sana_600M_512px_diffusers"
    out = _finished_run(tmp_path, str(tmp_path / "models" / "tiny-sana"), entry, ("num_layers 2 (28)",))
    push_adapter(out, REPO_ID, log=lambda line: None)
    pushed = hub.files["README.md"].decode()
    assert entry not in pushed and 'base = "tiny-sana"' in pushed and "base_model:" not in pushed


def test_the_pushed_card_of_a_dora_run_is_written_for_the_repo(hub, tmp_path, monkeypatch):
    """A DoRA run records --use_dora false beside --lora_type dora (the alias resolved at start): the pushed card is
    still rebuilt from that record, not refused as the two flags disagreeing."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out = _finished_run(tmp_path, str(tmp_path / "models" / "my-sana"), None, lora_type="dora")
    lines: list[str] = []
    push_adapter(out, REPO_ID, log=lines.append)
    pushed = hub.files["README.md"].decode()
    assert f'"{REPO_ID}"' in pushed and any(f"loads the adapter from {REPO_ID}" in line for line in lines)
