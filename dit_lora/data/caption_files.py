"""Read a caption file beside an image or clip: UTF-8 (a byte-order mark dropped), UTF-16 with its byte-order mark,
or a sample refused with the reason, every one of them named together.

The encodings, decided against what the reference trainers read: kohya-ss' sd-scripts and musubi-tuner open caption
files as UTF-8 (a UTF-8 byte-order mark would stay in their caption; here it is dropped, as Python's ``utf-8-sig``
does), diffusers' DreamBooth scripts and `datasets` read UTF-8 only. A UTF-16 file that starts with its byte-order
mark (what Windows Notepad saves as "Unicode") is unambiguous, so it is read, and one line says so (the others would
refuse it). Anything else that is not UTF-8 (Latin-1 or Windows-1252, Shift-JIS, UTF-16 without a byte-order mark)
cannot be read without guessing: the sample is refused with the reason (:func:`caption_refusal`), ``check-data``
shows each as a BLOCK row, and training stops with every such file in one paragraph
(:func:`refuse_unreadable_captions`), rather than one file per run.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import Any

from dit_lora.core.errors import UserError
from dit_lora.data.samples import name_some

__all__ = ["NotUTF8", "caption_refusal", "decode_caption", "refuse_unreadable_captions", "unreadable_captions"]

#: how the reason of a sample refused for its caption file begins (the listings write it, training finds it by it)
_PREFIX = "caption file "
_FIX = (
    "Re-save them as UTF-8 text (an editor's 'save with encoding: UTF-8', or "
    "`iconv -f LATIN1 -t UTF-8 in.txt > out.txt`, with the file's own encoding: SHIFT_JIS, UTF-16LE, CP1252)"
)


class NotUTF8(ValueError):
    """A caption file that is not UTF-8 text (nor UTF-16 with a byte-order mark); ``detail`` says where and why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _text(decoded: str) -> str:
    # line ends as a file opened in text mode reads them (universal newlines), then stripped
    return decoded.replace("\r\n", "\n").replace("\r", "\n").strip()


def decode_caption(data: bytes) -> tuple[str, bool]:
    """The text of a caption file's bytes (line ends read as ``\\n``, stripped) and whether it was UTF-16 (read by its
    byte-order mark).

    Raises:
        NotUTF8: not UTF-8 and no UTF-16 byte-order mark; ``detail`` names the first bad byte, and NUL bytes as
            the mark of UTF-16 without a byte-order mark.
    """
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not data.startswith(codecs.BOM_UTF32_LE):
        try:
            return _text(data.decode("utf-16")), True
        except UnicodeDecodeError:
            pass  # a byte-order mark followed by no UTF-16: said as any other undecodable file
    if b"\x00" in data:  # valid UTF-8 as bytes (UTF-16 of ASCII text is), never a caption
        raise NotUTF8("NUL bytes: UTF-16 without a byte-order mark?")
    try:
        return _text(data.decode("utf-8-sig")), False
    except UnicodeDecodeError as err:
        raise NotUTF8(
            f"byte 0x{data[err.start]:02x} at offset {err.start}: Latin-1, Windows-1252 or Shift-JIS?"
        ) from None


def caption_refusal(file_key: str, detail: str) -> str:
    """The reason a sample is refused for its caption file ``file_key`` (relative to the data folder)."""
    return f"{_PREFIX}{file_key} is not UTF-8 text ({detail}), so its caption cannot be read. {_FIX}"


def unreadable_captions(samples: Sequence[Any]) -> list[Any]:
    """The samples refused for a caption file that is not UTF-8 (:func:`caption_refusal`)."""
    return [s for s in samples if (getattr(s, "refused", None) or "").startswith(_PREFIX)]


def refuse_unreadable_captions(samples: Sequence[Any], where: str) -> None:
    """Stop, in one paragraph, when any caption file is not UTF-8: every one of them (file and reason, the first
    few named, a count), and the fix. ``where``: the data folder and its flag (``--train_data_dir data``)."""
    bad = unreadable_captions(samples)
    if not bad:
        return
    named = [s.refused[len(_PREFIX) :].split(" is not UTF-8 text (", 1) for s in bad]
    files = [f"{name} ({detail.split('), so its caption', 1)[0]})" for name, detail in named]
    raise UserError(
        f"{len(bad)} caption file(s) in {where} are not UTF-8 text, so their captions cannot be read: "
        f"{name_some(files)}. {_FIX}, then run again; `dit-lora check-data` lists every one (UTF-16 with a "
        "byte-order mark and UTF-8 with or without one are read as they are)."
    )
