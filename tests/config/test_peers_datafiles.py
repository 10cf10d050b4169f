"""config/peers*.json: the peer-flag tables as package data. Every row reads into its dataclass (known keys of their
types), none is lost on the way to ``PEER_FLAGS``, and a misspelt key stops naming the file, the row and the key."""

from __future__ import annotations

import json
import sys

import pytest

from dit_lora.config import peers, peers_llamafactory, peers_memory
from dit_lora.config.peers import PEER_FLAGS, Peer
from dit_lora.core.datafile import DataFileError, read, records
from helpers import ROOT

FOLDER = ROOT / "dit_lora" / "config"


def raw(name: str) -> dict:
    return json.loads((FOLDER / name).read_text())


def test_every_row_of_the_three_files_is_a_peer_flag():
    own = [name for rows in raw("peers.json")["flags"].values() for name in rows]
    llamafactory, memory = list(raw("peers_llamafactory.json")["flags"]), list(raw("peers_memory.json")["flags"])
    assert len(own) == len(set(own)) and not set(own) & set(llamafactory) and not set(own) & set(memory)
    assert list(PEER_FLAGS) == own + llamafactory + memory
    assert list(peers_llamafactory.FLAGS) == llamafactory and list(peers_memory.FLAGS) == memory
    assert all(isinstance(peer, Peer) and isinstance(peer.sources, tuple) for peer in PEER_FLAGS.values())


def test_the_files_top_level_keys_are_the_modules_tables():
    assert set(raw("peers.json")) == {"parts", "sources", "peers", "flags", "same_names", "same_name_caveats"}
    assert set(raw("peers_llamafactory.json")) == {"trainer", "sources", "flags", "same_names", "caveats"}
    assert set(raw("peers_memory.json")) == {"parts", "sources", "flags"}
    assert set(peers.SOURCES) == {
        *raw("peers.json")["sources"],
        *raw("peers_llamafactory.json")["sources"],
        *raw("peers_memory.json")["sources"],
    }
    assert all(isinstance(words, tuple) for _, words in peers.PEERS.values())


@pytest.mark.parametrize(("key", "typo"), [("note", "notes"), ("sources", "source")])
def test_a_misspelt_key_names_the_file_the_row_and_the_key(tmp_path, monkeypatch, key, typo):
    data = raw("peers.json")
    section = next(iter(data["flags"]))
    name, row = next((n, r) for n, r in data["flags"][section].items() if key in r)
    row[typo] = row.pop(key)
    (tmp_path / "peers_copy").mkdir()
    (tmp_path / "peers_copy" / "__init__.py").write_text("")
    (tmp_path / "peers_copy" / "peers.json").write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "peers_copy", raising=False)
    found = read("peers_copy", "peers.json", list(data))
    with pytest.raises(DataFileError) as caught:
        records(Peer, found["flags"][section], "peers_copy/peers.json", f"flags.{section}")
    message = str(caught.value)
    assert "peers_copy/peers.json" in message and f"flags.{section}.{name}" in message, message
    assert f"unknown key {typo!r}" in message and key in message, message


def test_a_row_of_another_type_is_refused():
    with pytest.raises(DataFileError, match=r"peers_memory.json: flags.qtype.sources is \"at\", not a list of str"):
        records(peers_memory._Row, {"qtype": {"trainers": "ai-toolkit", "option": None, "sources": "at"}},
                "dit_lora/config/peers_memory.json", "flags")
