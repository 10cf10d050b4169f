"""--push_to_hub is checked at the start of a run (output/hub.py: check_push, preflight_push, push_after_run).

Against the local stand-in Hub (tests/support/hub_standin.py): no token, a bad token, an unreachable endpoint (a
closed local port), a read-only token, a repository of another user, HF_HUB_OFFLINE, and --push_later_ok, whose run
trains anyway and ends with the `dit-lora push` command. The token never appears in a message.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

import huggingface_hub.constants as hf_constants
from dit_lora.config import parse_config
from dit_lora.core.errors import UserError
from dit_lora.output.hub import check_push, preflight_push, push_command
from helpers import base_args, run_recipe
from hub_standin import HubStandIn, _make_handler

TOKEN = "hf_StandInSecretToken0123456789"


class ReadOnlyHub(HubStandIn):
    """The stand-in, but its token is a read-only one (whoami role `read`; auth-check/write answers 403)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        base = _make_handler(self)

        class Handler(base):
            def _answer(self, kind, match, body):
                answer = super()._answer(kind, match, body)
                if kind == "whoami":
                    answer["auth"]["accessToken"]["role"] = "read"
                return answer

        self._server.RequestHandlerClass = Handler


def _point_at(monkeypatch, tmp_path, url: str) -> None:
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(hf_constants, "AGENT_HARNESSES_PATH", str(tmp_path / "hf_home" / "harnesses.json"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "ENDPOINT", url)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with HubStandIn(token=TOKEN) as server:
        _point_at(monkeypatch, tmp_path, server.url)
        yield server


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: connections are refused


def _refused(**kwargs) -> str:
    with pytest.raises(UserError) as caught:
        check_push(**kwargs)
    text = str(caught.value)
    assert TOKEN not in text and TOKEN[3:] not in text
    return text


def test_a_writable_repo_passes_and_creates_nothing(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    check_push("standin-user/sana-lora")
    assert "POST /api/repos/create" not in hub.paths() and "GET /api/whoami-v2" in hub.paths()


def test_no_token(hub):
    assert "no Hugging Face token found" in _refused(hub_model_id="standin-user/sana-lora")
    assert [p for p in hub.paths() if "harness" not in p] == []


def test_a_bad_token(hub):
    text = _refused(hub_model_id="standin-user/sana-lora", token="hf_WrongWrongWrong0000000")
    assert "invalid or expired" in text and "hf_WrongWrongWrong0000000" not in text


def test_an_unreachable_hub(monkeypatch, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    _point_at(monkeypatch, tmp_path, url)
    started = time.monotonic()
    text = _refused(hub_model_id="standin-user/sana-lora", token=TOKEN)
    assert f"the Hub at {url} cannot be reached" in text and time.monotonic() - started < 30


def test_a_read_only_token(monkeypatch, tmp_path):
    with ReadOnlyHub(token=TOKEN) as server:
        _point_at(monkeypatch, tmp_path, server.url)
        text = _refused(hub_model_id="standin-user/sana-lora", token=TOKEN)
    assert "read-only" in text


def test_a_repo_of_another_user(hub):
    text = _refused(hub_model_id="someone-else/their-lora", token=TOKEN)
    assert "`someone-else` is neither the token's user (`standin-user`)" in text


def test_offline_is_refused_before_any_request(hub, monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    assert "HF_HUB_OFFLINE is set" in _refused(hub_model_id="standin-user/sana-lora", token=TOKEN)
    assert hub.requests == []


def _cfg(**extra):
    args = ["--pretrained_model_name_or_path", "m", "--train_data_dir", "d", "--push_to_hub",
            "--hub_model_id", "someone-else/their-lora"]
    for k, v in extra.items():
        args += [f"--{k}", v]
    return parse_config(args)


def test_the_push_command_pastes_into_a_shell_as_one_word_per_argument(tmp_path):
    import shlex

    folder = tmp_path / "my runs" / "it's $HOME"
    line = push_command(folder, "me/lora", private=True)
    assert shlex.split(line) == ["dit-lora", "push", str(folder), "--hub_model_id", "me/lora", "--private"]
    # A plain folder gets no quotes at all.
    assert push_command("runs/lora", "me/lora") == "dit-lora push runs/lora --hub_model_id me/lora"


def test_preflight_stops_naming_both_ways_out(hub):
    with pytest.raises(UserError) as caught:
        preflight_push(_cfg().hub, "runs/x")
    text = str(caught.value)
    assert text.startswith("--push_to_hub cannot push to someone-else/their-lora: no Hugging Face token found")
    assert "--push_later_ok" in text and "dit-lora push runs/x --hub_model_id someone-else/their-lora" in text


def test_preflight_with_push_later_ok_is_a_warning(hub):
    note = preflight_push(_cfg(push_later_ok="true").hub, "runs/x")
    assert note.startswith("warning: --push_to_hub cannot push") and "dit-lora push runs/x" in note


def test_a_push_without_a_repository_is_one_paragraph(tmp_path):
    """A run names the repo after its output folder when --hub_model_id is not given (diffusers' default, chosen
    with the defaults); a caller that built the options itself without one hears one paragraph, not a TypeError
    from the push command."""
    from dit_lora.config.schema import HubOptions
    from dit_lora.output.hub import push_after_run

    hub = HubOptions(push_to_hub=True, push_later_ok=True)
    with pytest.raises(UserError, match="--push_to_hub needs --hub_model_id"):
        preflight_push(hub, tmp_path)
    with pytest.raises(UserError, match="--push_to_hub needs --hub_model_id"):
        push_after_run(tmp_path, hub)


def _recipe_env(url: str, tmp_path: Path, **extra) -> dict:
    home = tmp_path / "hf_home"
    home.mkdir(exist_ok=True)
    (home / ".agent_harnesses.json").write_text('{"standardEnvVars": [], "harnesses": {}}')
    return {"HF_ENDPOINT": url, "HF_HOME": str(home), "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1",
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "HF_TOKEN": TOKEN, **extra}


@pytest.mark.slow
def test_a_run_that_cannot_push_stops_before_training(tmp_path, tiny_sana, shapes_data):
    url = f"http://127.0.0.1:{_closed_port()}"
    out = tmp_path / "out"
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", push_to_hub="true",
                     hub_model_id="standin-user/sana-lora")
    started = time.monotonic()
    proc = run_recipe(args, env=_recipe_env(url, tmp_path), timeout=120)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, text
    assert f"the Hub at {url} cannot be reached" in text and "Nothing was trained" in text
    assert "training:" not in text and not (out / "pytorch_lora_weights.safetensors").exists()
    assert TOKEN not in text and "Traceback" not in text
    print(f"stopped in {time.monotonic() - started:.1f} s")


@pytest.mark.slow
def test_push_later_ok_trains_and_ends_with_the_push_command(tmp_path, tiny_sana, shapes_data):
    """HF_HUB_OFFLINE=1 (as in CI): the check fails, the run trains, the end push fails, the command is printed."""
    out = tmp_path / "out"
    args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=2, push_to_hub="true",
                     hub_model_id="standin-user/sana-lora", push_later_ok="true")
    # a fork of a warm interpreter (tests/support/warm.py): the token is read when the run asks for it
    proc = run_recipe(args, env={"HF_HUB_OFFLINE": "1", "HF_TOKEN": TOKEN}, timeout=300, warm=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, text
    assert "warning: --push_to_hub cannot push to standin-user/sana-lora now: HF_HUB_OFFLINE is set" in text
    assert (out / "pytorch_lora_weights.safetensors").is_file() and "finished:" in text
    assert text.count(f"dit-lora push {out} --hub_model_id standin-user/sana-lora") >= 2  # at start and at the end
    assert TOKEN not in text


@pytest.mark.slow
def test_push_after_training_to_the_standin(tmp_path, tiny_sana, shapes_data):
    with HubStandIn(token=TOKEN) as server:
        out = tmp_path / "out"
        args = base_args(tiny_sana, shapes_data, out, tmp_path / "cache", max_train_steps=1, push_to_hub="true",
                         hub_model_id="standin-user/sana-lora")
        proc = run_recipe(args, env=_recipe_env(server.url, tmp_path), timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    paths = server.paths()
    assert paths.index("GET /api/whoami-v2") < paths.index("POST /api/repos/create")
    assert "pytorch_lora_weights.safetensors" in server.files and f"pushed to {server.url}" in text
