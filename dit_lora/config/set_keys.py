"""How a message names a data set's options: as the set's file writes them, not as dit-lora's flags.

A set of a dataset config is read by the family's own handler with the set's options as if they were flags, so the
handler's paragraphs and log lines say ``--train_data_dir '/data/x' does not exist`` or ``pass --caption_extension
.txt``. For a set, that advice is wrong twice: the flag would not reach the set (its own key wins over the run's),
and the file may call the key otherwise (musubi-tuner's ``image_directory``, ai-toolkit's ``caption_ext``).
:func:`in_set_terms` rewrites each ``--option [value]`` of a set option into the key as the file writes it, with
the value in the file's syntax (TOML ``key = "value"``, YAML ``key: value``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping

#: ``--option``, an optional value after it (quoted, a path, an extension or a number; a word only when it is one of
#: the option's choices, else it is the sentence's), and an optional ``pass `` before it (a flag is passed, a key set)
_FLAG = re.compile(
    r"(?P<pass>pass )?--(?P<name>\w+)(?: (?:(?P<value>'[^']*'|\"[^\"]*\"|[./~\d][^\s,;)]*)|(?P<word>[A-Za-z_]\w*)))?"
)


def said(key: str, value: object, *, toml: bool) -> str:
    """``key`` given ``value`` as a file of the set's kind writes it: ``key = "value"`` (TOML) or ``key: value``."""
    return f"{key} = {json.dumps(value)}" if toml else f"{key}: {value}"


def in_set_terms(
    text: str,
    options: Collection[str],
    keys: Mapping[str, str],
    *,
    toml: bool,
    choices: Mapping[str, Collection[str]] | None = None,
) -> str:
    """``text`` with each ``--option [value]`` of ``options`` (a set's options) named as the set's file writes it:
    its key (``keys``: the file's name of an option, where it is not the option's), its value in the file's syntax
    (``choices``: the words an option takes as its value), and ``pass --option value`` as ``set `key = value` in
    the set``."""

    def named(match: re.Match[str]) -> str:
        name, value, word = match["name"], match["value"], match["word"]
        if name not in options:
            return match[0]
        key = keys.get(name, name)
        if word is not None and word in (choices or {}).get(name, ()):
            value = word
        elif word is not None:  # the sentence's word, not a value
            return f"{match['pass'] or ''}`{key}` {word}"
        if value is None:
            return f"{match['pass'] or ''}`{key}`"
        tail = ""
        if value[0] not in "'\"" and value[-1] in ".:" and len(value) > 1:  # the sentence's full stop or colon
            value, tail = value[:-1], value[-1]
        raw: object = value[1:-1] if value[0] in "'\"" else value
        if re.fullmatch(r"\d+", str(raw)):
            raw = int(str(raw))
        shown = f"`{said(key, raw, toml=toml)}`"
        return (f"set {shown} in the set" if match["pass"] else shown) + tail

    return _FLAG.sub(named, text)


__all__ = ["in_set_terms", "said"]
