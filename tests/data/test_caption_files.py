"""Tests for dit_lora.data.caption_files: caption files read as UTF-8 (or UTF-16 by its byte-order mark), every other
one refused with its reason and all of them named together."""

from __future__ import annotations

import codecs

import pytest

from dit_lora.core.errors import UserError
from dit_lora.data import load_samples
from dit_lora.data.caption_files import (
    ControlBytes,
    NotUTF8,
    clean_caption,
    decode_caption,
    refuse_unreadable_captions,
    unreadable_captions,
)
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
    ("a cat".encode("utf-16-be"), "NUL bytes: UTF-16 without a byte-order mark?"),
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


@pytest.mark.parametrize("data,detail", [
    # the issue: a captioner's NUL among UTF-8 text was blamed on UTF-16
    (b"dire\x00ful sq\x1auare\x11", "0x00 at offset 4, 0x1a at offset 11, 0x11 at offset 16; the rest is UTF-8"),
    (b"\x1b[31mred\x1b[0m", "0x1b at offset 0, 0x1b at offset 8; the rest is UTF-8"),  # a terminal's colours
    ("café\x85".encode(), "U+0085 at offset 5; the rest is UTF-8"),  # a C1 control, two bytes in UTF-8
    (b"\x01\x02\x03\x04 text", "0x01 at offset 0, 0x02 at offset 1, 0x03 at offset 2; 4 in all; the rest is UTF-8"),
])
def test_control_bytes_in_utf8_are_named_as_control_bytes(data, detail):
    with pytest.raises(ControlBytes) as err:
        decode_caption(data)
    assert err.value.detail == detail and "UTF-16" not in err.value.detail


def test_tabs_and_line_ends_are_text():
    assert decode_caption(b"a\tcat\r\non a mat\n") == ("a\tcat\non a mat", False)


def test_clean_caption_removes_control_and_replacement_characters_only():
    assert clean_caption("a\x00 red\ufffd\x1b square\x85\tcafé\n") == ("a red square\tcafé\n", 4)
    assert clean_caption("a photo of sks") == ("a photo of sks", 0)


def test_control_bytes_and_other_encodings_are_said_apart_in_one_paragraph(tmp_path):
    root = bad_caption_folder(tmp_path / "data")
    (root / "ctrl.png").write_bytes((root / "utf8.png").read_bytes())
    (root / "ctrl.txt").write_bytes(b"a red\x00 square")
    samples = load_samples(train_data_dir=root, log=Log())
    with pytest.raises(UserError) as err:
        refuse_unreadable_captions(samples, "--train_data_dir `data`")
    text = str(err.value)
    assert text.startswith("3 caption file(s) in --train_data_dir `data` are not UTF-8 text")
    assert ("1 caption file(s) in --train_data_dir `data` hold control bytes, which no caption has" in text
            and "ctrl.txt (0x00 at offset 5; the rest is UTF-8)" in text and "tr -d" in text)
    assert "ctrl.txt" not in text.split("hold control bytes")[0] and "\n" not in text
