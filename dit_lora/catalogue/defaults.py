"""Apply a checkpoint's defaults to a run, and say in one block what was chosen and why.

Precedence, highest first: what the user set (flag or YAML), the catalogue entry whose published
config the model has, the family's generic defaults derived from the model's own configs (e.g. the
resolution a DiT's ``sample_size`` implies), and the schema's defaults. Only the first three are
reported: the block lists every value the run took from the catalogue or the model, and every value
the user set that differs from the catalogue's.
"""

from __future__ import annotations

import copy
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dit_lora.catalogue import Checkpoint, by_hub_id, match
from dit_lora.config import TrainConfig, config_fields, optimizers
from dit_lora.config.schema import ModelOptions
from dit_lora.contract.spec import FamilySpec, generic_defaults
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.pipeline_files import read_component_config, stored_dtype

_REPO_WHY = "diffusers' default with --push_to_hub: the output folder's name, a repo of your token's account"


def _repo_named_after(output_dir: str) -> str:
    """The repo --push_to_hub names after the output folder when --hub_model_id is not given, as diffusers' scripts
    do; a folder whose name is no repo name is refused naming both."""
    name = Path(output_dir).resolve().name
    if not re.fullmatch(r"[\w.-]+", name) or name.startswith(("-", ".")) or len(name) > 96:
        raise UserError(
            f"--push_to_hub without --hub_model_id names the repo after the output folder, as diffusers' scripts "
            f"do, but `{name or output_dir}` (--output_dir `{output_dir}`) is no repo name (letters, digits, `-`, "
            "`_` and `.`). Give --hub_model_id (e.g. `me/my-lora`), or an --output_dir with such a name."
        )
    return name


def explicit_options(cfg: TrainConfig) -> frozenset[str]:
    """Options the user set: ``cfg.explicit`` (recorded by the parser); for a config built in code, those off
    their default."""
    if cfg.explicit is not None:
        return cfg.explicit
    changed = set()
    for f in config_fields():
        default = f.default if f.default is not MISSING else f.default_factory()
        if cfg.option(f.name) != default:
            changed.add(f.name)
    return frozenset(changed)


def config_reader(model: ModelOptions):
    """A cached reader of the small JSON files of ``model`` (the run's ``cfg.model``: a local folder or the Hub
    cache), for :func:`match`.

    A catalogued Hub id that is not downloaded yet reads the catalogue's copy of its published configs, so
    its defaults (and ``dit-lora plan``) need no download.
    """
    cache: dict[tuple[str, str], dict | None] = {}
    published = by_hub_id(str(model.pretrained_model_name_or_path or ""))

    def read(subfolder: str, filename: str) -> dict | None:
        if (subfolder, filename) not in cache:
            found = read_component_config(model, subfolder, filename)
            if found is None and published is not None:
                # a copy: transformers' config classes edit the dict they are given (rope_scaling's "type" becomes
                # "rope_type"), which changed the catalogue entry for the rest of the process
                found = copy.deepcopy(published.configs.get("/".join(p for p in (subfolder, filename) if p)))
            cache[subfolder, filename] = found
        return cache[subfolder, filename]

    return read


@dataclass
class ChosenDefaults:
    """What :func:`choose_defaults` decided: the matched entry, the values applied and the user's own, and the
    config with them (:attr:`config`)."""

    model: str
    family: str
    entry: Checkpoint | None
    applied: dict[str, tuple[Any, str]] = field(default_factory=dict)  # option -> (value, where it came from)
    differences: list[str] = field(default_factory=list)  # depth values the model does not share with the entry
    overridden: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # option -> (user's value, catalogue's)
    config: TrainConfig | None = None  # the config the defaults were chosen for, with the applied values

    def lines(self) -> list[str]:
        """The start-of-run block (a header line, then one line per option)."""
        if self.entry is not None:
            head = (
                f"defaults: `{self.model}` has the published config of {self.entry.hub_id} ({self.entry.title}; "
                f"trained at {self.entry.trained_text()}, {self.entry.stored_dtype} weights)"
            )
            if self.differences:
                head += f" except {', '.join(self.differences)}"
        else:
            head = (
                f"defaults: `{self.model}` matches no catalogued {self.family} checkpoint (`dit-lora models` lists "
                "them), so it trains with the family's generic defaults"
            )
        if not self.applied and not self.overridden:  # a header ending in ":" with nothing after it reads as cut off
            if self.entry is None:
                head = head.replace(
                    ", so it trains with the family's generic defaults",
                    " and none of the family's generic defaults applies to it",
                )
            return [head + "; every option keeps your value or its documented default"]
        out = [head + ":"]
        width = max((len(k) for k in [*self.applied, *self.overridden]), default=0)
        for name, (value, why) in self.applied.items():
            out.append(f"  --{name:<{width}} {value!s:<10} {why}")
        for name, (mine, theirs) in self.overridden.items():
            out.append(f"  --{name:<{width}} {mine!s:<10} yours (the catalogue's: {theirs})")
        return out

    def summary(self) -> dict[str, Any]:
        """For ``train_summary.json``: the entry and every value chosen on the user's behalf."""
        return {
            "catalogue_entry": self.entry.hub_id if self.entry else None,
            "differences": list(self.differences),  # the entry's depths the model does not share (a reduced copy)
            "applied": {k: v for k, (v, _) in self.applied.items()},
            "user_set": {k: mine for k, (mine, _) in self.overridden.items()},
        }


def choose_defaults(cfg: TrainConfig, spec: FamilySpec) -> ChosenDefaults:
    """The values of every option the user left unset that the catalogue entry or the model's configs decide, and
    ``cfg`` with them (``.config``, a new frozen config: ``cfg`` is not changed).

    Reads small config files only. The family's ``generic_defaults`` (``spec.defaults``) come first and the entry's values
    replace them, so a catalogued model gets the published figures and any other model what its own
    configs imply.
    """
    explicit = explicit_options(cfg)
    entry = None
    if cfg.model.pretrained_model_name_or_path:
        entry = match(
            spec.name, config_reader(cfg.model), stored_dtype(cfg.model), cfg.model.pretrained_model_name_or_path
        )
    proposals: dict[str, tuple[Any, str]] = dict(generic_defaults(spec, cfg.model, cfg.family_options))
    if entry is not None:
        for name, value in entry.defaults.items():
            proposals[name] = (value, f"{entry.hub_id}: {entry.sources.get(name) or entry.sources['defaults']}")
    chosen = ChosenDefaults(
        str(cfg.model.pretrained_model_name_or_path),
        spec.name,
        entry,
        differences=entry.depth_differences(config_reader(cfg.model)) if entry else [],
    )
    if entry is not None and "rank" in explicit and "lora_alpha" not in explicit and "lora_alpha" in entry.defaults:
        # Keep the published scale (alpha / rank), not the published alpha, at the rank the user chose.
        ratio = entry.defaults["lora_alpha"] / entry.defaults["rank"]
        proposals["lora_alpha"] = (
            cfg.lora.rank * ratio,
            f"{entry.hub_id}: the published alpha / rank ratio {ratio:g} at your --rank",
        )
    if cfg.hub.push_to_hub and "hub_model_id" not in explicit:  # diffusers' scripts: a repo named after the output
        proposals["hub_model_id"] = (_repo_named_after(cfg.training.output_dir), _REPO_WHY)
    optimizer_rate = optimizers.named(cfg.training.optimizer).default_learning_rate  # the optimizer table's
    if optimizer_rate is not None:  # over the entry's learning rate, which is AdamW's
        proposals["learning_rate"] = optimizer_rate
    if cfg.video.frame_buckets:  # the buckets are every clip's size (check_combinations): no size default beside them
        for name in ("max_num_frames", "height", "width"):
            proposals.pop(name, None)
    own = {f.name for f in fields(cfg.family_options)}  # a family's own option (Ideogram 4's --logit_std) too

    def current(name: str) -> Any:
        return getattr(cfg.family_options, name) if name in own else cfg.option(name)

    for name, (value, why) in proposals.items():
        if (name in explicit) if name not in own else cfg.is_set(name):
            # "the catalogue's" only for the entry's own value (not one that replaced it: Prodigy's learning rate)
            from_entry = entry is not None and name in entry.defaults and entry.defaults[name] == value
            if from_entry and current(name) != value:
                chosen.overridden[name] = (current(name), value)
            continue
        chosen.applied[name] = (value, why)
    family = {name: value for name, (value, _) in chosen.applied.items() if name in own}
    config = replace(cfg, **{name: value for name, (value, _) in chosen.applied.items() if name not in own})
    chosen.config = replace(config, family_options=replace(cfg.family_options, **family)) if family else config
    return chosen
