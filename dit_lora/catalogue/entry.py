"""One catalogued checkpoint: what was published about it, and the recipe defaults it gets.

Config values are facts copied from the published files (each entry cites where); nothing here is
loaded from the network. An entry is matched by the *content* of a model's configs
(:attr:`Checkpoint.signature`), never by its name, so a local copy or a fine-tune that kept the
architecture gets the same defaults as the Hub release.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: reads one small JSON file of a model folder: ``(subfolder, filename) -> dict | None``
ConfigReader = Callable[[str, str], "dict | None"]


@dataclass(frozen=True)
class Checkpoint:
    """A published checkpoint dit-lora supports.

    ``signature`` maps a config file (``"transformer/config.json"``, ``"config.json"``) to the values that
    identify the architecture (a dotted key such as ``text_config.vocab_size`` reads a nested dict);
    ``depth`` holds the values a derived model may change without changing what it is (the layer count:
    a reduced-depth copy still gets the entry's defaults, and the start-of-run block says what differs).
    ``configs`` holds every published component config by the same keys (the real-layout tests build
    folders from them). ``defaults`` are recipe options (``TrainConfig`` field names) the run takes
    unless the user set them; ``sources`` says where each fact was checked. One checkpoint that two recipe
    families train (a text-and-image-to-video model) is one entry: ``family`` plus ``also_families``.
    """

    hub_id: str
    family: str
    title: str
    signature: dict[str, dict[str, Any]]
    configs: dict[str, dict[str, Any]]
    #: the 16-bit (or 32-bit) weights the release ships, as its main files or as a ``variant``
    stored_dtype: str
    text_length: int
    defaults: dict[str, Any]
    sources: dict[str, str]
    #: what it was trained at: ``{"resolution": px}`` or ``{"frames", "height", "width", "fps"}``
    trained: dict[str, int] = field(default_factory=dict)
    #: file names in the tokenizer folder (diffusers) or the repo root (transformers), as the Hub has them
    tokenizer_files: tuple[str, ...] = ()
    depth: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: str = ""
    #: further families that train this same checkpoint (Wan 2.2 TI2V-5B: ``wan_i2v`` besides ``wan``). ``family``
    #: stays the one a Hub id alone implies; the entry is still listed once (``entries()``, ``by_hub_id``)
    also_families: tuple[str, ...] = ()
    #: non-empty for a published checkpoint dit-lora recognises but refuses to train (its sampler needs an
    #: objective no family implements): the one paragraph saying why, with the source, and what to train instead.
    #: Such entries live in a data file's ``REFUSED`` list, never in ``ENTRIES`` (no defaults, no plan)
    refusal: str = ""

    def __post_init__(self) -> None:
        if self.family in self.also_families or len(set(self.also_families)) != len(self.also_families):
            raise ValueError(
                f"{self.hub_id}: also_families {self.also_families} repeats a family (its family is {self.family!r})"
            )

    @property
    def families(self) -> tuple[str, ...]:
        """Every family whose runs get this entry's defaults: ``family`` first, then ``also_families``."""
        return (self.family, *self.also_families)

    def matches(self, read: ConfigReader) -> bool:
        """True when every signature value equals the model's config (missing files never match)."""
        for file, expected in self.signature.items():
            sub, _, name = file.rpartition("/")
            found = read(sub, name)
            if found is None:
                return False
            for key, value in expected.items():
                if _normal(lookup(found, key)) != _normal(value):
                    return False
        return True

    def depth_differences(self, read: ConfigReader) -> list[str]:
        """``["num_layers 2 (published: 28)"]``: the ``depth`` values the model does not share."""
        out = []
        for file, expected in self.depth.items():
            sub, _, name = file.rpartition("/")
            found = read(sub, name) or {}
            for key, value in expected.items():
                if _normal(lookup(found, key)) != _normal(value):
                    out.append(f"{key} {lookup(found, key)} (published: {value})")
        return out

    def trained_text(self) -> str:
        """``1024 px`` or ``49 x 480 x 720 at 8 fps``."""
        t = self.trained
        if "resolution" in t:
            return f"{t['resolution']} px"
        if "frames" in t:
            return f"{t['frames']} x {t['height']} x {t['width']} at {t['fps']} fps"
        return "-"


def lookup(config: dict, key: str) -> Any:
    """``config[key]``, where ``a.b`` reads ``config["a"]["b"]``; None when any part is missing.

    A plain key missing at the top is looked up in ``text_config``: transformers 5 saves a VLM's language-model
    sizes there, while the Hub files of Qwen2.5-VL keep them at the top.
    """
    if "." not in key and key not in config and isinstance(config.get("text_config"), dict):
        return config["text_config"].get(key)
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _normal(value: Any) -> Any:
    """Compare JSON lists and tuples alike, and ints with equal floats."""
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
