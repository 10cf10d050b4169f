"""Tests for dit_lora.data.caption_files: caption files read as UTF-8 (or UTF-16 by its byte-order mark), every other
one refused with its reason and all of them named together."""

from __future__ import annotations

import codecs

import pytest

from dit_lora.core.errors import UserError
from dit_lora.data import load_samples
from dit_lora.data.caption_files import NotUTF8, decode_caption, refuse_unreadable_captions, unreadable_captions
from data_files import Log, bad_caption_folder


def test_utf8_with_or_without_its_mark_and_utf16_with_its_mark_are_read():
    assert decode_caption("a café\n".encode()) == ("a café", False)
    assert decode_caption(codecs.BOM_UTF8 + "a café".encode()) == ("a café", False)
    assert decode_caption("a café".encode("utf-16")) == ("a café", True)
    assert decode_caption(codecs.BOM_UTF16_BE + "a café".encode("utf-16-be")) == ("a café", True)


@pytest.mark.parametrize("data,detail", [
    ("a café".encode("latin-1"), "byte 0xe9 at offset 5: Latin-1, Windows-1252 or Shift-JIS?"),
    ("猫".encode("shift_jis"), "byte 0x94 at offset 0: Latin-1, Windows-1252 or Shift-JIS?"),
    ("a cat".encode("utf-16-le"), "NUL bytes: UTF-16 without a byte-order mark?"),
])
def test_anything_else_is_refused_with_where_and_a_guess(data, detail):
    with pytest.raises(NotUTF8) as err:
        decode_caption(data)
    assert err.value.detail == detail


def test_every_bad_caption_file_is_listed_in_one_paragraph(tmp_path):
    """The issue: Latin-1, Shift-JIS and UTF-16 captions were reported one file per run."""
    log = Log()
    samples = load_samples(train_data_dir=bad_caption_folder(tmp_path / "data"), log=log)
    captions = {s.key: s.caption for s in samples if s.refused is None}
    assert captions == {"utf8.png": "a café", "utf8_bom.png": "a café", "utf16_bom.png": "a café"}
    assert [s.key for s in unreadable_captions(samples)] == ["latin1.png", "shift_jis.png", "utf16_no_bom.png"]
    assert any(line.startswith("1 caption file(s) are UTF-16 with a byte-order mark: read as UTF-16")
               and line.endswith("utf16_bom.txt") for line in log)
    with pytest.raises(UserError) as err:
        refuse_unreadable_captions(samples, "--train_data_dir `data`")
    text = str(err.value)
    assert text.startswith(
        "3 caption file(s) in --train_data_dir `data` are not UTF-8 text, so their captions cannot be read: "
        "latin1.txt (byte 0xe9 at offset 5: Latin-1, Windows-1252 or Shift-JIS?), shift_jis.txt (byte 0x94 at offset "
        "0: Latin-1, Windows-1252 or Shift-JIS?), utf16_no_bom.txt (NUL bytes: UTF-16 without a byte-order mark?). "
        "Re-save them as UTF-8 text")
    assert "\n" not in text and "dit-lora check-data` lists every one" in text


def test_the_display_is_capped_with_a_count(tmp_path):
    for i in range(8):
        bad_caption_folder(tmp_path / "data" / f"set{i}")
    samples = load_samples(train_data_dir=tmp_path / "data", log=Log())
    with pytest.raises(UserError) as err:
        refuse_unreadable_captions(samples, "--train_data_dir `data`")
    assert str(err.value).startswith("24 caption file(s) in --train_data_dir `data` are not UTF-8 text")
    assert " and 19 more. Re-save them" in str(err.value)
