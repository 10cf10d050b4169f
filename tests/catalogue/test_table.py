"""catalogue/table.py: ``dit-lora models`` as a table and as JSON."""

from __future__ import annotations

import json

from dit_lora.catalogue import entries
from dit_lora.catalogue import table


def test_table_has_one_row_per_entry_under_aligned_headings():
    text = table.format_table()
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["Hub", "id", "family"] and set(lines[1]) == {"-"}
    every = entries()
    rows = lines[2:2 + len(every)]
    assert [row.split()[0] for row in rows] == [e.hub_id for e in every]
    column = lines[0].index("family")
    assert all(row[column:].startswith(e.family) for row, e in zip(rows, every))
    assert "flags you give win" in lines[2 + len(every) + 1]  # after the rows; the refused list follows


def test_table_of_one_family():
    rows = table.format_table("sana").split("Recognised and refused")[0].splitlines()[2:]
    hub_ids = {e.hub_id for e in entries("sana")}
    listed = [row.split()[0] for row in rows if row.strip() and not row.startswith("A model folder")]
    assert set(listed) == hub_ids and hub_ids


def test_numbers_are_written_short():
    assert table._number(1e-4) == "1e-4" and table._number(0.5) == "0.5" and table._number(3) == "3"
    assert table._number(0.0) == "0"


def test_json_round_trips_every_entry():
    data = json.loads(table.as_json("dit"))
    assert [d["hub_id"] for d in data] == [e.hub_id for e in entries("dit")]
    assert all(d["family"] == "dit" for d in data)


def test_refused_checkpoints_are_listed_after_the_table_with_why():
    from dit_lora.catalogue import refused

    text = table.format_table()
    tail = text.split("Recognised and refused", 1)[1]
    assert refused() and all(e.hub_id in tail for e in refused())
    assert "SANA-Sprint" in tail and "sCM + LADD" in tail
    assert all(e.hub_id not in table.format_table("dit") for e in refused())  # another family's list: not shown
    assert "Recognised and refused" not in table.format_table("dit")
