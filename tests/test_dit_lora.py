"""The `dit_lora` package itself: its version matches the distribution's, and `load_adapter` is the API's."""

from __future__ import annotations

import tomllib

from helpers import ROOT

import dit_lora


def test_version_is_the_projects():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert dit_lora.__version__ == project["version"]


def test_load_adapter_hands_over_to_the_api(monkeypatch):
    from dit_lora import api

    seen = []
    monkeypatch.setattr(api, "load_adapter", lambda pipe, folder, adapter_name=None: seen.append(
        (pipe, folder, adapter_name)) or "loaded")
    assert dit_lora.load_adapter("pipe", "out", adapter_name="style") == "loaded"
    assert seen == [("pipe", "out", "style")]
