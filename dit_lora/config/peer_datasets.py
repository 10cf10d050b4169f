"""Other trainers' dataset files read as a dataset config (:mod:`.dataset_config`): musubi-tuner's (and kohya's
sd-scripts') TOML with ``image_directory``/``video_directory`` sets, and an ai-toolkit job YAML's ``datasets:``.

Each set's keys that map are translated into dit-lora's data options (:func:`translate`); what has no counterpart
is left out and named, with why, in one paragraph the run and ``check-data`` print (never silently); what would
train something else than the file asks (a control folder, regularization images, another metadata format) is
refused. The mapping is the migration guide's table (docs/guides/migrating.md).

Each trainer's own part is its module: :mod:`.peer_musubi` (musubi-tuner's and kohya's TOML) and
:mod:`.peer_ai_toolkit` (an ai-toolkit job's datasets); this module reads them alike (:func:`translate`) and holds
what the other peers' readers share (:class:`Derived`, :func:`their_keys_of`, :func:`ignored_notes`, :class:`ReadAs`).
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_lora.config.peer_ai_toolkit import (
    AI_TOOLKIT,
    AI_TOOLKIT_IGNORED,
    AI_TOOLKIT_MAPPED,
    ai_toolkit_dropped,
    translate_ai_toolkit,
)
from dit_lora.config.peer_musubi import (
    MUSUBI,
    MUSUBI_IGNORED,
    MUSUBI_MAPPED,
    MUSUBI_MARKS,
    MUSUBI_MAX_FRAMES,
    musubi_dropped,
    translate_musubi,
)
from dit_lora.core.errors import UserError

#: keys that would train something else than the set asks: refused, with what to do
REFUSED = {
    "image_jsonl_file": "musubi-tuner's metadata JSONL (`image_path`/`video_path` and `caption` per line) is not "
    "read: write a metadata.jsonl with `file_name` and `text` in the folder, or keep a caption file beside each file",
    "video_jsonl_file": "musubi-tuner's metadata JSONL (`image_path`/`video_path` and `caption` per line) is not "
    "read: write a metadata.jsonl with `file_name` and `text` in the folder, or keep a caption file beside each file",
    "control_directory": "control images train only the edit families, from their own control folder options",
    "control_path": "control images train only the edit families, from their own control folder options",
}


def flavour_of(data: dict[str, Any], sets: list[dict[str, Any]], toml: bool) -> str | None:
    """Whose file this is: :data:`AI_TOOLKIT` (a job YAML), :data:`MUSUBI` (a TOML with their keys), or None
    (dit-lora's own)."""
    if "job" in data or isinstance(data.get("config"), dict):
        return AI_TOOLKIT
    general: dict[str, Any] = data["general"] if isinstance(data.get("general"), dict) else {}
    keys = {str(k) for s in sets for k in s} | {str(k) for k in general}
    return MUSUBI if toml and keys & set(MUSUBI_MARKS) else None


#: the file's keys each translated option comes from with the same value (the first the set gives), by flavour:
#: what messages call the option (an option whose value differs from its source's, as `frame_buckets` from
#: `target_frames`, keeps its own name: a set of that file may give it too)
THEIR_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    MUSUBI: {"train_data_dir": ("image_directory", "video_directory", "image_dir"), "repeats": ("num_repeats",)},
    AI_TOOLKIT: {
        "train_data_dir": ("folder_path",),
        "repeats": ("num_repeats",),
        "loss_weight": ("loss_multiplier",),
        "caption_extension": ("caption_ext",),
        "max_num_frames": ("num_frames",),
    },
}


def their_keys(translated: dict[str, Any], entry: dict[str, Any], flavour: str) -> dict[str, str]:
    """Each option of ``translated`` that the ``flavour`` set ``entry`` gives under another name: that name."""
    return their_keys_of(translated, entry, THEIR_KEYS[flavour])


def their_keys_of(
    translated: dict[str, Any], entry: dict[str, Any], table: dict[str, tuple[str, ...]]
) -> dict[str, str]:
    """Each option of ``translated`` that ``entry`` gives under another name of ``table`` (option -> the file's keys
    it comes from, the first the set gives): that name, what the set's messages call the option."""
    out = {}
    for option in translated:
        found = [key for key in table.get(option, ()) if key in entry]
        if found and found[0] != option:
            out[option] = found[0]
    return out


@dataclass(frozen=True)
class Derived:
    """What a translated set's options stand for in another trainer's file, beyond their names (the
    :class:`~.dataset_file.DataSet` keeps it)."""

    #: options the file does not give, set to what its trainer does by default, each with those words: an explicit
    #: run option (a flag or a --config key) takes their place (:func:`~dit_lora.data.data_sets.set_config`)
    implied: dict[str, str] = field(default_factory=dict)
    #: options the file gives under a key of another value, each with the file's words (``frame_extraction =
    #: 'chunk'``): an explicit run option of another value is refused
    origin: dict[str, str] = field(default_factory=dict)
    #: sizes that follow the family's rules, fitted once the family is known
    #: (:func:`~dit_lora.data.data_sets.fit_to_family`): ``side`` (ai-toolkit's ``resolution`` of a clip set), or
    #: ``full_frames``, ``height`` and ``width`` (musubi-tuner's ``frame_extraction = 'full'``)
    fit: dict[str, int] = field(default_factory=dict)


def _derived(translated: dict[str, Any], entry: dict[str, Any], flavour: str) -> Derived:
    """The :class:`Derived` of one translated set of ``entry``."""
    implied, origin, fit = {}, {}, {}
    if "frame_sampling" in translated:
        key = "frame_extraction" if flavour == MUSUBI else "shrink_video_to_frames"
        if key in entry:
            origin["frame_sampling"] = f"`{key} = {entry[key]!r}`" if flavour == MUSUBI else f"`{key}: true`"
        elif flavour == MUSUBI:
            implied["frame_sampling"] = "musubi-tuner's default `frame_extraction = 'head'`"
        else:
            implied["frame_sampling"] = "ai-toolkit's default `shrink_video_to_frames: true`"
    if flavour == MUSUBI and entry.get("frame_extraction") == "full" and "frame_buckets" in translated:
        width, height = (int(v) for v in entry["resolution"])
        fit = {"full_frames": int(entry.get("max_frames", MUSUBI_MAX_FRAMES)), "height": height, "width": width}
    elif flavour == AI_TOOLKIT and "height" in translated and "side" in translated:
        fit = {"side": int(translated.pop("side"))}
    return Derived(implied, origin, fit)


def translate(
    entry: dict[str, Any], flavour: str, *, video: bool, where: str, own: frozenset[str] = frozenset()
) -> tuple[list[tuple[dict, dict, Derived]], list[str]]:
    """One set of a ``flavour`` file as dit-lora's set(s) (an ai-toolkit list of resolutions is one set per
    resolution, as ai-toolkit splits it), each with the file's names of its options (:func:`their_keys`) and what
    they stand for (:class:`Derived`), and the ``key (why)`` notes of what was left out. A key in ``own`` (dit-lora's own set keys, e.g. ``weight`` added to a
    musubi-tuner file) passes through as it is; one that a translated key also sets is refused. A refused key set
    to false or null is its default, nothing to refuse."""
    refused = [k for k in entry if k in REFUSED and entry[k]]
    if refused:
        raise UserError(f"{where} gives `{refused[0]}`: {REFUSED[refused[0]]}.")
    entry = {k: v for k, v in entry.items() if not (k in REFUSED or k == "is_reg") or v}
    mapped = MUSUBI_MAPPED if flavour == MUSUBI else AI_TOOLKIT_MAPPED
    kept = {k: v for k, v in entry.items() if k in own and k not in mapped}
    theirs = {k: v for k, v in entry.items() if k not in kept}
    try:
        if flavour == MUSUBI:
            sets = [translate_musubi(theirs, video=video, where=where, sampling="frame_sampling" not in kept)]
            notes = ignored_notes(theirs, MUSUBI_IGNORED, MUSUBI_MAPPED, where, toml=True)
            notes += musubi_dropped(theirs, video=video, where=where)
        else:
            sets = translate_ai_toolkit(theirs, video=video, sampling="frame_sampling" not in kept)
            notes = ignored_notes(theirs, AI_TOOLKIT_IGNORED, AI_TOOLKIT_MAPPED, where)
            notes += ai_toolkit_dropped(theirs, video=video)
    except (TypeError, ValueError):
        raise UserError(
            f"{where}: a size or frame count of this {flavour} set is not a whole number ({theirs!r}); fix the value."
        ) from None
    named = []
    for translated in sets:
        clash = sorted(set(translated) & set(kept))
        if clash:
            raise UserError(f"{where} gives `{clash[0]}` and also {flavour}'s key that means it; keep one of the two.")
        derived = _derived(translated, theirs, flavour)
        named.append((translated, their_keys(translated, theirs, flavour), derived))
        translated.update(kept)
    return named, notes


def ignored_notes(
    entry: dict[str, Any], table: dict[str, str], mapped: frozenset[str], where: str, *, toml: bool = False
) -> list[str]:
    """```key: value` (why)`` (TOML: ``key = value``) for each key of ``entry`` the translation leaves out: those of
    ``table`` with their reason, any other unmapped one as having no counterpart; a key a letter or two from one the
    translation reads is a typo, refused naming it (left out, it would train without what it meant)."""
    unknown = [k for k in entry if k not in mapped and k not in table]
    for key in unknown:
        close = difflib.get_close_matches(key, sorted(mapped), n=1, cutoff=0.8)
        if close:
            raise UserError(f"{where} has the key `{key}`: did you mean `{close[0]}`? Fix the key.")
    return [
        f"`{given(k, v, toml=toml)}` ({table.get(k, 'no counterpart in dit-lora')})"
        for k, v in entry.items()
        if k not in mapped or k in table
    ]


def given(key: str, value: Any, *, toml: bool) -> str:
    """``key`` with ``value`` as the user's file writes it: ``key = value`` in TOML, ``key: value`` in YAML or JSON
    (true, false and null as those write them)."""
    if toml or isinstance(value, bool) or value is None:
        shown = json.dumps(value, default=str)
    else:
        shown = str(value)
    return f"{key} = {shown}" if toml else f"{key}: {shown}"


def toml_config_message(path: Path, text: str, *, suffix_only: bool) -> str | None:
    """The paragraph for a TOML file given as the run's ``--config`` (a YAML file), or None when ``text`` is not
    TOML (``suffix_only``: judged by its ``.toml`` suffix alone, else by whether it parses as TOML): a dataset
    config (musubi-tuner's or kohya's ``[[datasets]]``, or dit-lora's own) is read with --dataset_config."""
    named_toml = path.suffix.lower() == ".toml"
    if suffix_only and not named_toml:
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        if not named_toml:
            return None
        yaml_named = yaml_named_toml(path, text, err, "--config")
        if yaml_named:
            return yaml_named
        data = {}  # a broken TOML file is still no YAML run config
    if isinstance(data.get("directory"), list):  # diffusion-pipe's dataset.toml
        return (
            f"The config file `{path}` (from --config) is diffusion-pipe's dataset.toml (`[[directory]]` tables), not "
            f"a run config: pass it as --dataset_config {path} (each directory is read as a set, what has no "
            "counterpart named), with the run's options as flags or in a YAML --config."
        )
    if isinstance(data.get("datasets"), list):
        return (
            f"The config file `{path}` (from --config) is a TOML dataset config (`[[datasets]]` tables, as "
            "musubi-tuner and kohya's sd-scripts write them), not a run config: --config reads dit-lora's YAML, one "
            f"`option: value` per line. Pass it as --dataset_config {path} (its sets are read as they are, what has no "
            "counterpart named), with the run's options as flags or in a YAML --config; docs/guides/migrating.md maps "
            "musubi-tuner's flags."
        )
    return (
        f"The config file `{path}` (from --config) is TOML; --config reads dit-lora's YAML run config, one `option: "
        "value` per line, the same names as its --flags. Rewrite it as YAML; a TOML list of data sets "
        f"(`[[datasets]]`) is read with --dataset_config {path}."
    )


def yaml_named_toml(path: Path, text: str, err: Exception, flag: str) -> str | None:
    """The paragraph for a file named ``.toml`` that is no TOML (``err``) but a YAML mapping: it was written as YAML
    and named otherwise (files are read by their suffix), or None when it is no YAML either."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    return (
        f"`{path}` (from {flag}) is named .toml but holds YAML: it is no TOML ({err}), and it reads as a YAML mapping "
        f"(`{next(iter(data), '')}: ...`). Files are read by their suffix: rename it to `{path.with_suffix('.yaml')}` "
        f"and pass that to {flag}"
        + (", or write it in TOML." if flag != "--config" else " (--config reads YAML only).")
    )


def captions_from_names(underscores: bool) -> str:
    """A shell line writing each image's or clip's file name as its caption file, in every subfolder, never over a
    caption file that exists (``underscores``: ``_`` read as spaces, as SimpleTuner's ``filename`` captions)."""
    tr = " | tr _ ' '" if underscores else ""
    return (
        "find . -type f \\( -iname '*.png' -o -iname '*.jp*g' -o -iname '*.webp' -o -iname '*.mp4' \\) | "
        f'while read -r f; do t="${{f%.*}}.txt"; [ -e "$t" ] || basename "${{f%.*}}"{tr} > "$t"; done'
    )


def multi_line_captions(folder: Any, extension: str = ".txt") -> list[str]:
    """The caption files (``extension``) under ``folder`` holding several non-empty lines, relative to it: dit-lora
    reads such a file whole, where SimpleTuner and OneTrainer take each line as a caption of its own."""
    found: list[str] = []
    if not isinstance(folder, str) or not os.path.isdir(folder):
        return found
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(f for f in filenames if f.lower().endswith(extension)):
            try:
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as handle:
                    lines = [line for line in handle.read().splitlines() if line.strip()]
            except OSError:
                continue  # the listing names an unreadable file
            if len(lines) > 1:
                found.append(os.path.relpath(os.path.join(dirpath, name), folder))
    return found


def multi_line_note(folder: Any, trainer: str) -> list[str]:
    """The :class:`ReadAs` note on ``folder``'s caption files of several lines (none: no note)."""
    files = multi_line_captions(folder)
    if not files:
        return []
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return [
        ReadAs(
            f"{len(files)} caption file(s) of several lines ({shown}) read whole, each one caption: {trainer} takes "
            "each line as a caption of its own and draws one"
        )
    ]


class ReadAs(str):
    """A note on a key that was read otherwise than its name says (SimpleTuner's ``repeats: 1`` is two passes), said
    before what was left out."""


def ignored_paragraph(path, flavour: str, notes: list[str]) -> str | None:
    """The one paragraph naming how the run reads a ``flavour`` file: the keys read otherwise than their name says
    (:class:`ReadAs`), then what it leaves out; None when there is nothing to say."""
    only = (
        " Only the job's `datasets` are read: its model, network, train and sample sections are the run's options "
        "(flags or --config)."
        if flavour == AI_TOOLKIT
        else ""
    )
    read_as = [n for n in dict.fromkeys(notes) if isinstance(n, ReadAs)]
    left_out = [n for n in dict.fromkeys(notes) if not isinstance(n, ReadAs)]
    if not notes and not only:
        return None
    how = f" ({'; '.join(read_as)})" if read_as else ""
    left = f"; left out: {'; '.join(left_out)}" if left_out else ""
    return (
        f"dataset config `{path}` ({flavour}'s): read as dit-lora's sets{how}{left}.{only} See "
        "docs/guides/migrating.md for the mapping."
    )
