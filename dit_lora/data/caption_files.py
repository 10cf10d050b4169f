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

A file that is UTF-8 but holds control characters (NUL, ESC, the other C0 and C1 codes but tab and line ends) is no
text either: what wrote it (a captioner decoding random bytes, a terminal's colour codes piped into a file) went
wrong, and a tokenizer would train on the garbage. It is refused the same way, its control bytes named as such (not
as a guessed encoding); UTF-16 without a byte-order mark (NUL in every other byte) is still said as that.
:func:`clean_caption` is what ``dit-lora caption`` writes through, so its own files are never refused.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from typing import Any

from dit_lora.core.errors import UserError
from dit_lora.data.samples import name_some

__all__ = [
    "ControlBytes",
    "NotUTF8",
    "caption_refusal",
    "clean_caption",
    "decode_caption",
    "refuse_unreadable_captions",
    "unreadable_captions",
]

#: how the reason of a sample refused for its caption file begins (the listings write it, training finds it by it)
_PREFIX = "caption file "
_FIX = (
    "Re-save them as UTF-8 text (an editor's 'save with encoding: UTF-8', or "
    "`iconv -f LATIN1 -t UTF-8 in.txt > out.txt`, with the file's own encoding: SHIFT_JIS, UTF-16LE, CP1252)"
)
_CONTROL_FIX = (
    "Remove those bytes (`tr -d '\\000-\\010\\013\\014\\016-\\037\\177' < in.txt > out.txt`; C1 codes, U+0080 to "
    "U+009F, are two bytes that tr cannot take out: write those captions again), or write the captions again: "
    "`dit-lora caption --overwrite` writes clean text)"
)
#: control characters no caption holds: C0 but tab, line feed and carriage return; DEL; C1
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
#: how many control bytes a refusal names by offset
_NAMED_BYTES = 3
#: what a refusal says a file is, by its kind (:class:`NotUTF8`, :class:`ControlBytes`)
_NOT_UTF8, _CONTROL = "is not UTF-8 text", "holds control bytes"
_REASON = re.compile(rf"^{_PREFIX}(.*) ({_NOT_UTF8}|{_CONTROL}) \((.*)\), so its caption cannot be read\. ")


class NotUTF8(ValueError):
    """A caption file that is not UTF-8 text (nor UTF-16 with a byte-order mark); ``detail`` says where and why."""

    problem = _NOT_UTF8

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ControlBytes(NotUTF8):
    """A caption file that is UTF-8 but holds control characters (:data:`CONTROL`); ``detail`` names the first
    few and their byte offsets."""

    problem = _CONTROL


def _text(decoded: str) -> str:
    # line ends as a file opened in text mode reads them (universal newlines), then stripped
    return decoded.replace("\r\n", "\n").replace("\r", "\n").strip()


def _looks_utf16(data: bytes) -> bool:
    """UTF-16 of mostly ASCII text without its byte-order mark: NUL in at least a third of the even or of the odd
    bytes, and the whole decodes as UTF-16 without control characters."""
    for start, codec in ((1, "utf-16-le"), (0, "utf-16-be")):
        half = data[start::2]
        if len(data) % 2 == 0 and half and half.count(0) * 3 >= len(half):
            try:
                text = data.decode(codec)
            except UnicodeDecodeError:
                continue
            if not CONTROL.search(text):
                return True
    return False


def _code(char: str) -> str:
    """A control character as its byte (C0, DEL) or its code point (C1, two bytes in UTF-8)."""
    return f"0x{ord(char):02x}" if ord(char) < 0x80 else f"U+{ord(char):04X}"


def _control_detail(data: bytes) -> str:
    """The first control bytes of UTF-8 ``data`` with their offsets, and how many there are."""
    found = [(m.start(), m.group()) for m in CONTROL.finditer(data.decode("utf-8-sig", errors="replace"))]
    offsets = [m.start() for m in re.finditer(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]", data)]
    pairs = list(zip(found, offsets))[:_NAMED_BYTES]
    named = ", ".join(f"{_code(char)} at offset {at}" for (_, char), at in pairs)
    more = f"; {len(found)} in all" if len(found) > _NAMED_BYTES else ""
    return f"{named}{more}; the rest is UTF-8"


def decode_caption(data: bytes) -> tuple[str, bool]:
    """The text of a caption file's bytes (line ends read as ``\\n``, stripped) and whether it was UTF-16 (read by its
    byte-order mark).

    Raises:
        NotUTF8: not UTF-8 and no UTF-16 byte-order mark; ``detail`` names the first bad byte, and NUL bytes in
            every other byte as the mark of UTF-16 without a byte-order mark.
        ControlBytes: UTF-8 holding control characters; ``detail`` names them as such, with their offsets.
    """
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not data.startswith(codecs.BOM_UTF32_LE):
        try:
            return _text(data.decode("utf-16")), True
        except UnicodeDecodeError:
            pass  # a byte-order mark followed by no UTF-16: said as any other undecodable file
    if b"\x00" in data and _looks_utf16(data):  # valid UTF-8 as bytes (UTF-16 of ASCII text is), never a caption
        raise NotUTF8("NUL bytes: UTF-16 without a byte-order mark?")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise NotUTF8(
            f"byte 0x{data[err.start]:02x} at offset {err.start}: Latin-1, Windows-1252 or Shift-JIS?"
        ) from None
    if CONTROL.search(text):
        raise ControlBytes(_control_detail(data))
    return _text(text), False


def clean_caption(text: str) -> tuple[str, int]:
    """``text`` without the control characters (:data:`CONTROL`) and replacement characters (U+FFFD: bytes a
    tokenizer decoded that were no text) a generated caption may hold, and how many were removed: what
    ``dit-lora caption`` writes, so training reads every caption it wrote."""
    cleaned, removed = CONTROL.subn("", text)
    removed += cleaned.count("\ufffd")
    return cleaned.replace("\ufffd", ""), removed


def caption_refusal(file_key: str, err: NotUTF8) -> str:
    """The reason a sample is refused for its caption file ``file_key`` (relative to the data folder)."""
    fix = _CONTROL_FIX if isinstance(err, ControlBytes) else _FIX
    return f"{_PREFIX}{file_key} {err.problem} ({err.detail}), so its caption cannot be read. {fix}"


def unreadable_captions(samples: Sequence[Any]) -> list[Any]:
    """The samples refused for a caption file that is not UTF-8 text (:func:`caption_refusal`)."""
    return [s for s in samples if _REASON.match(getattr(s, "refused", None) or "")]


def refuse_unreadable_captions(samples: Sequence[Any], where: str) -> None:
    """Stop, in one paragraph, when any caption file is not UTF-8 text: every one of them (file and reason, the first
    few named, a count), and the fix: those in another encoding first, then those holding control bytes.
    ``where``: the data folder and its flag (``--train_data_dir data``)."""
    kinds: dict[str, list[str]] = {_NOT_UTF8: [], _CONTROL: []}
    for sample in unreadable_captions(samples):
        match = _REASON.match(sample.refused)
        assert match is not None  # unreadable_captions matched it
        kinds[match.group(2)].append(f"{match.group(1)} ({match.group(3)})")
    parts = []
    if kinds[_NOT_UTF8]:
        parts.append(
            f"{len(kinds[_NOT_UTF8])} caption file(s) in {where} are not UTF-8 text, so their captions cannot be read: "
            f"{name_some(kinds[_NOT_UTF8])}. {_FIX}"
        )
    if kinds[_CONTROL]:
        parts.append(
            f"{len(kinds[_CONTROL])} caption file(s) in {where} hold control bytes, which no caption has (what wrote "
            f"them went wrong; a tokenizer would train on them): {name_some(kinds[_CONTROL])}. {_CONTROL_FIX}"
        )
    if parts:
        raise UserError(
            ". ".join(parts) + ", then run again; `dit-lora check-data` lists every one (UTF-16 with a byte-order mark "
            "and UTF-8 with or without one are read as they are)."
        )
