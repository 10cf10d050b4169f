"""data/prepared_data.py: what preparing yields: the cache files a batch may read, the left-out samples counted
against --max_bad_samples_fraction, and quarantine.json written by the main process."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from dit_lora.core.errors import UserError
from dit_lora.data.prepared_data import LeftOut, PreparedData, write_quarantine
from dit_lora.output.names import QUARANTINE_FILE


def test_the_cache_entries_are_the_training_the_held_out_and_the_empty_captions_files():
    dataset = types.SimpleNamespace(files=[Path("a"), Path("b")], empty_prompt=Path("empty"))
    held = PreparedData(types.SimpleNamespace(files=[Path("h")]), list, ["h"], True)
    data = PreparedData(dataset, list, ["a", "b"], True, held_out=held)
    assert data.cache_entries() == [Path("a"), Path("b"), Path("h"), Path("empty")] and len(data) == 2
    assert PreparedData(dataset, list, ["a", "b"], False).cache_entries() == []  # decoded each step: no cache
    no_empty = PreparedData(types.SimpleNamespace(files=[Path("a")], empty_prompt=None), list, ["a"], True)
    assert no_empty.cache_entries() == [Path("a")]


def test_left_out_samples_above_the_fraction_stop_the_run_naming_the_list(tmp_path):
    left_out = LeftOut(10, "training samples", tmp_path / QUARANTINE_FILE, 0.1)
    left_out.entries.append({"key": "a.png", "reason": "unreadable"})
    left_out.stop_if_too_many()  # 1 of 10: at the limit, not above it
    left_out.entries.append({"key": "b.png", "reason": "empty caption"})
    with pytest.raises(UserError) as err:
        left_out.stop_if_too_many()
    text = str(err.value)
    assert text.startswith("2 of 10 training samples (20.0%) could not be used")
    assert "a.png (unreadable), b.png (empty caption)" in text and str(tmp_path / QUARANTINE_FILE) in text


def test_the_quarantine_is_written_by_the_main_process_only(tmp_path):
    entries = [{"key": "a.png", "reason": "unreadable"}]
    main = types.SimpleNamespace(is_main_process=True, process_index=0, num_processes=1)
    path = write_quarantine(tmp_path / "out", main, entries)
    assert path == tmp_path / "out" / QUARANTINE_FILE and json.loads(path.read_text()) == entries
    other = types.SimpleNamespace(is_main_process=False, process_index=1, num_processes=1)
    assert not (write_quarantine(tmp_path / "other", other, entries)).exists()
