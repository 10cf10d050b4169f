"""kohya's ``--network_args`` (sd-scripts, musubi-tuner: LyCORIS' ``key=value`` words) as dit-lora's flags.

A user arriving with ``--network_module lycoris.kohya --network_args algo=lokr factor=8`` gets the paragraph for
the unknown option (:mod:`.peers`) and, from here, the very flags that ask dit-lora for the same adapter:
``--lora_type lokr --lokr_factor 8``. The mapping is LyCORIS' own argument names as sd-scripts passes them to
``lycoris.kohya.create_network`` (``algo``, ``factor``, ``decompose_both``, ``rank_dropout``, ``module_dropout``,
``use_tucker``, ``dora_wd``); what has no counterpart is named, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["network_args_values", "translate_network_args"]

_TRUE = {"true", "1", "yes", "on"}
#: LyCORIS' words with a dit-lora flag of the same meaning taking the value as it is
_SAME_VALUE = {"factor": "lokr_factor", "rank_dropout": "rank_dropout", "module_dropout": "module_dropout"}
#: LyCORIS' switches and dit-lora's flag for them when true
_SWITCHES = {"decompose_both": "lokr_decompose_both", "use_tucker": "use_effective_conv2d"}
_ALGOS = {"lokr": "lokr", "loha": "loha", "lora": "lora", "locon": "lora"}


def network_args_values(args: Sequence[str]) -> list[str]:
    """The words after ``--network_args`` (or in ``--network_args=...``) in command-line ``args``, up to the next
    flag."""
    words: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--network_args="):
            words.append(arg.split("=", 1)[1])
        elif arg == "--network_args":
            for later in args[i + 1 :]:
                if later.startswith("--"):
                    break
                words.append(later)
    return words


def _pairs(words: Iterable[str]) -> list[tuple[str, str]]:
    pairs = []
    for word in words:
        for part in str(word).replace(",", " ").split():
            key, _, value = part.partition("=")
            pairs.append((key.strip().lower(), value.strip().strip("\"'")))
    return pairs


def translate_network_args(words: Iterable[str]) -> str | None:
    """One sentence giving dit-lora's flags for kohya ``--network_args`` ``words`` (``["algo=lokr", "factor=8"]``,
    or a YAML list/string), naming what does not translate; None when there are no words."""
    pairs = _pairs(words)
    if not pairs:
        return None
    flags: list[str] = []
    untranslated: list[str] = []
    values = dict(pairs)
    algo = values.get("algo", "").lower()
    dora = values.get("dora_wd", "").lower() in _TRUE
    if algo in _ALGOS:
        kind = "dora" if dora and _ALGOS[algo] == "lora" else _ALGOS[algo]
        flags.append(f"--lora_type {kind}")
        if dora and kind != "dora":
            untranslated.append(f"dora_wd with algo={algo} (PEFT has no DoRA form of it)")
    elif algo:
        untranslated.append(f"algo={algo} (dit-lora trains lora, dora, lokr and loha)")
    for key, value in pairs:
        if key in ("algo", "dora_wd"):
            continue
        if key in _SAME_VALUE:
            flags.append(f"--{_SAME_VALUE[key]} {value}")
        elif key in _SWITCHES:
            if value.lower() in _TRUE:
                flags.append(f"--{_SWITCHES[key]} true")
        else:
            untranslated.append(f"{key}={value}" if value else key)
    said = " ".join(f"{k}={v}" if v else k for k, v in pairs)
    sentence = f"Your --network_args {said} in dit-lora's flags: {' '.join(flags) or '(none of them)'}"
    if untranslated:
        sentence += (
            f"; not translated: {', '.join(untranslated)} (--lora_layers picks the layers, one --rank and "
            "--lora_alpha for all)"
        )
    return sentence + "."
