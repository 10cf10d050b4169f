"""Several data sets in one run (``--dataset_config``, :mod:`dit_lora.config.dataset_config`): each set listed,
screened, bucketed and cached by the family's own handler with its own options, then trained as one data set.

:class:`SetsMedia` is a :class:`~dit_lora.data.prepared_data.MediaHandler` over one handler per set (the family's
``data_handler`` given the run's config with the set's options, :func:`set_config`): :func:`prepare_data` and
``check-data`` run it as they run a single handler. Each sample carries its set (``data_set``) and a key prefixed
with the set's name (``photos/0001.png``), so the log, ``quarantine.json`` and the held-out choice tell the sets
apart; a set's ``repeats`` lists each of its samples that many times, as kohya folders do (the copies share one cache
entry). Batches never mix sets (each set's buckets are its own batch groups), so a set's ``loss_weight`` is a factor
of its batches' loss (:class:`SetMix`, applied by the training step), and its ``weight`` is the probability that a
batch is drawn from it (:class:`~dit_lora.data.batches.EpochBatches`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.config.dataset_config import FRAME_SIZES, data_sets_of
from dit_lora.config.dataset_file import SET_OPTIONS, DataSet
from dit_lora.config.sections import config_fields
from dit_lora.config.set_keys import in_set_terms
from dit_lora.contract import spec as fallback
from dit_lora.core.errors import UserError
from dit_lora.data import class_images, listing
from dit_lora.data.batches import EpochBatches, PairedBatches, paired_order, unpack_item
from dit_lora.data.cache import cache_files, cache_namespace
from dit_lora.data.frames import most_tokens
from dit_lora.data.held_out import folder_config, handler_for_source
from dit_lora.data.kohya import plural

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig
    from dit_lora.contract.capabilities import VideoFrames
    from dit_lora.contract.spec import FamilySpec

#: a set's copies of a sample are numbered past any kohya folder's repeats (``repeat`` > 0 marks a copy)
_SET_COPY = 10_000


#: the set options of --with_prior_preservation's class set -> the flags that give them (run_sets)
CLASS_FLAGS = {"instance_prompt": "--class_prompt", "train_data_dir": "--class_data_dir"}


def set_config(cfg: TrainConfig, data_set: DataSet) -> TrainConfig:
    """The run's config reading ``data_set``: its options over the run's (its own ``frame_buckets`` over the run's
    --max_num_frames/--height/--width too), its own data source alone; class images
    (``is_reg``) never take the run's --instance_prompt (the instance's caption on a generic image would teach the
    identifier to the class). An option another trainer's file only implies (its default, :func:`yielded`) yields
    to the run's explicit one."""
    kept = yielded(cfg.is_set, data_set)
    values = {
        "train_data_dir": None,
        "dataset_name": None,
        **{k: v for k, v in data_set.options.items() if k not in kept},
    }
    if data_set.options.get("frame_buckets"):  # its own buckets take the place of the run's frames and size
        values.update({name: None for name in FRAME_SIZES})
    if data_set.is_reg:
        values.setdefault("instance_prompt", None)
    explicit = None if cfg.explicit is None else cfg.explicit | (set(data_set.options) - set(kept))
    return dataclasses.replace(cfg, **values, explicit=explicit)


def yielded(is_set: Callable[[str], bool], data_set: DataSet) -> dict[str, str]:
    """The options of ``data_set`` that another trainer's file only implies (its default, never written) and the run
    gives explicitly (a flag or a --config key: ``is_set``, the run's ``cfg.is_set``), each with the words of that
    default: the run's take their place."""
    return {n: words for n, words in data_set.derived.implied.items() if is_set(n)}


#: the words a set option takes as its value (its choices), which a message names after it
_SET_CHOICES = {f.name: tuple(f.metadata["choices"]) for f in config_fields() if f.metadata.get("choices")}

#: the name of the class images' set that --with_prior_preservation adds (its samples' keys start `class/`)
CLASS_SET = "class"


def has_sets(data: DataOptions) -> bool:
    """Whether the run reads its data as sets: a dataset config, prior preservation's class images, or --repeats
    (its data one set listed that many times)."""
    return bool(data.dataset_config or data.with_prior_preservation or data.repeats > 1)


def run_sets(cfg: TrainConfig, *, frames: VideoFrames | None = None) -> tuple[list[DataSet], str | None]:
    """The run's data sets, the class images' set (``is_reg``) last, and the note on what of another trainer's
    dataset file was left out: the dataset config's sets (as setup read them: ``cfg.data_sets``), or the run's own
    data; with --with_prior_preservation, and --class_data_dir as the class set (its captions --class_prompt, its
    first --num_class_images images). ``frames``: the video family's clip buckets, which fit another trainer's sizes
    to its rules (:func:`fit_to_family`)."""
    note = None
    read = data_sets_of(cfg.data, cfg.data_sets)
    if read is not None:
        sets, note = list(read.sets), read.note
        sets = [fit_to_family(cfg, s, frames) for s in sets] if frames is not None else sets
    else:
        source = "train_data_dir" if cfg.data.train_data_dir else "dataset_name"
        sets = [DataSet("instance", {source: getattr(cfg.data, source)}, repeats=cfg.data.repeats)]
    if cfg.data.with_prior_preservation and cfg.data.class_data_dir:
        # captioned --class_prompt, else by their own captions (never the run's --instance_prompt); the first
        # --num_class_images, the user's own first (SetsMedia.list_samples)
        options: dict[str, Any] = {"train_data_dir": cfg.data.class_data_dir, "instance_prompt": cfg.data.class_prompt}
        taken = {s.name for s in sets}
        name = CLASS_SET if CLASS_SET not in taken else f"{CLASS_SET}-{len(sets) + 1}"
        sets.append(DataSet(name, options, is_reg=True))
    return [s for s in sets if not s.is_reg] + [s for s in sets if s.is_reg], note


def _takes(frames: VideoFrames, cfg: TrainConfig, **sizes: int) -> bool:
    """Whether the family takes the clip ``sizes`` (max_num_frames, height, width; the others its default): its
    own ``video_buckets`` asked, as :func:`~dit_lora.data.video_prepare` asks it of one-frame buckets."""
    unset: dict[str, Any] = {"max_num_frames": None, "height": None, "width": None, "frame_buckets": None}
    video = dataclasses.replace(cfg.video, **{**unset, **sizes})
    try:
        frames.video_buckets(dataclasses.replace(cfg, video=video))
    except UserError:
        return False
    return True


def fit_to_family(cfg: TrainConfig, data_set: DataSet, frames: VideoFrames) -> DataSet:
    """``data_set`` with another trainer's sizes fitted to the video family's rules (``Derived.fit``): ai-toolkit's
    ``resolution`` as the largest side up to it the family takes, musubi-tuner's ``frame_extraction = 'full'`` as a
    bucket of each frame count up to its ``max_frames`` the family's frame rule takes. Unchanged without them."""
    fit = data_set.derived.fit
    options = dict(data_set.options)
    if "side" in fit:
        side = next((s for s in range(fit["side"] // 8 * 8, 7, -8) if _takes(frames, cfg, height=s, width=s)), None)
        if side is not None:
            options.update(height=side, width=side)
    if "full_frames" in fit:
        counts = [n for n in range(1, fit["full_frames"] + 1) if _takes(frames, cfg, max_num_frames=n)]
        if counts:
            options["frame_buckets"] = ",".join(f"{n}x{fit['height']}x{fit['width']}" for n in counts)
    return dataclasses.replace(data_set, options=options) if options != data_set.options else data_set


def fitted_line(data_set: DataSet) -> str | None:
    """What :func:`fit_to_family` made of another trainer's sizes in ``data_set``, said in its header (None: no
    such size, or kept as the file gives it)."""
    fit = data_set.derived.fit
    if "side" in fit and data_set.options.get("height") != fit["side"]:
        side = data_set.options.get("height")
        return f"`resolution: {fit['side']}` as clips of about {side} x {side} px, the largest side up to it the model takes"
    if "full_frames" in fit:
        counts = [b.split("x")[0] for b in str(data_set.options.get("frame_buckets", "")).split(",")]
        shown = ", ".join(counts) if len(counts) <= 4 else f"{', '.join(counts[:3])}, ..., {counts[-1]}"
        return f"`frame_extraction = 'full'`: frame buckets of {shown} frames, the counts the model takes"
    return None


def set_configs(cfg: TrainConfig, *, frames: VideoFrames | None = None) -> list[TrainConfig]:
    """The config each data set reads (:func:`set_config`), or ``[cfg]`` for one data set: what sizes the run meets
    (the memory plan plans every set's; ``frames``: a video family's, :func:`run_sets`). With class images a
    micro-batch holds as many of them as of its own images, which the plan counts as a batch twice the size (two
    forwards keep their activations for one backward)."""
    if not has_sets(cfg.data):
        return [cfg]
    sets, _ = run_sets(cfg, frames=frames)
    configs = [set_config(cfg, s) for s in sets]
    if any(s.is_reg for s in sets):
        doubled = dataclasses.replace(cfg.training, train_batch_size=2 * cfg.training.train_batch_size)
        configs = [dataclasses.replace(c, training=doubled) for c in configs]
    return configs


def sample_config(cfg: TrainConfig, spec: FamilySpec) -> tuple[TrainConfig, str | None]:
    """The config the validation samples are made with (:func:`sample_sizes` over the run's), and the line saying
    their size (None without a dataset config)."""
    sizes, line = sample_sizes(cfg, spec)
    return (dataclasses.replace(cfg, **sizes) if sizes else cfg), line


def sample_sizes(cfg: TrainConfig, spec: FamilySpec) -> tuple[dict[str, Any], str | None]:
    """The size options the validation samples take in place of the run's (flat names; empty: the run's), and the
    line saying their size (None without a dataset config). The run's size when the user gave one
    (--max_num_frames/--height/--width/--frame_buckets for clips, --resolution for images); else that of the first
    set (not the class images) giving its own, one giving a frame count first (a set of images in a video family
    gives none): its bucket of the most tokens (of a musubi-tuner ``full`` set, of at most the checkpoint's frames),
    or its resolution; else the run's (the checkpoint's default). Worked out once, at setup
    (``RunRecord.sample_sizes``), from the sets setup read (the file may change or go while the run trains)."""
    if not cfg.data.dataset_config:
        return {}, None
    video = spec.video_frames is not None
    names = (*FRAME_SIZES, "frame_buckets") if video else ("resolution",)
    given = [n for n in names if cfg.is_set(n) and cfg.option(n) is not None]
    sets = [] if given else [s for s in run_sets(cfg, frames=spec.video_frames)[0] if not s.is_reg]
    frames = [s for s in sets if s.options.get("frame_buckets") or s.options.get("max_num_frames")]  # clips' own
    chosen = next((s for s in [*frames, *sets] if any(s.options.get(n) is not None for n in names)), None)
    if chosen is not None:
        why = f"data set `{chosen.name}`'s size: the run gives no {'/'.join(f'--{n}' for n in names)} of its own"
    else:
        why = f"the run's {'/'.join(f'--{n}' for n in given)}" if given else "the run's default size"
    if not video:
        size = chosen.options["resolution"] if chosen is not None else cfg.data.resolution
        return {"resolution": size} if chosen is not None else {}, f"validation samples: {size} x {size} px ({why})"
    task = fallback.require(spec, "video_frames", "Video data")
    if chosen is None:
        f, h, w = task.video_buckets(cfg)[0]
        return {}, f"validation samples: {f}x{h}x{w} (frames x height x width; {why})"
    buckets = task.video_buckets(set_config(cfg, chosen))
    if "full_frames" in chosen.derived.fit:  # every length up to max_frames: at most the checkpoint's default
        default = task.video_buckets(cfg)[0][0]
        shorter = [b for b in buckets if b[0] <= default] or buckets[:1]
        if len(shorter) < len(buckets):
            why += f", its frames at most the checkpoint's default {default} (its buckets go up to {buckets[-1][0]})"
        buckets = shorter
    f, h, w = most_tokens(buckets)
    sizes = {"max_num_frames": None, "height": None, "width": None, "frame_buckets": f"{f}x{h}x{w}"}
    return sizes, f"validation samples: {f}x{h}x{w} (frames x height x width; {why})"


def distinct(batches: Sequence[tuple[str, tuple[int, ...]]]) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` batches without repeated shapes (several sets of one size plan once)."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for name, shape in batches:
        if shape not in seen:
            seen.add(shape)
            out.append((name, shape))
    return out


def refusal(spec: FamilySpec, handler: Any) -> str | None:
    """Why the family ``spec`` cannot train several data sets (its data reads more than a set's samples: class
    folders, control images, reference clips, conversations), or None."""
    if fallback.caption_source(spec) == "class_folders":
        why = "its class labels come from the class folders of one --train_data_dir"
    elif not getattr(handler, "data_sets", False):
        why = getattr(handler, "data_sets_refusal", "its data is read as one set")
    else:
        return None
    return (
        f"`{spec.name}` does not train from several data sets (a dataset config, --dataset_config or `datasets:` in "
        f"--config, --with_prior_preservation's class images, or --repeats): {why}. Give its data as --train_data_dir "
        "or --dataset_name; to mix folders or repeat them, gather them in one folder (kohya `N_name` sub-folders "
        "give each its repeats)."
    )


@dataclass(frozen=True)
class SetMix:
    """What the batch order and the step read of the sets: each set's name, its batch probability (normalised,
    None: the natural mix), its loss factor, and each sample's set."""

    names: tuple[str, ...]
    weights: tuple[float, ...] | None
    loss_weights: tuple[float, ...]
    of_sample: tuple[int, ...]
    #: which set holds the class images of prior preservation (``is_reg``: the last, its samples a suffix)
    reg: tuple[bool, ...] = ()
    #: the class images' loss weight (--prior_loss_weight)
    prior_loss_weight: float = 1.0

    @property
    def prior_start(self) -> int | None:
        """The index of the first class image among the samples (they come last), or None without class images."""
        for i, k in enumerate(self.of_sample):
            if self.reg and self.reg[k]:
                return i
        return None

    def for_samples(self, samples: Sequence[Any]) -> SetMix:
        """The same sets over ``samples`` (the kept ones, after caching left some out)."""
        return dataclasses.replace(self, of_sample=tuple(int(getattr(s, "data_set", 0)) for s in samples))

    def summary(self, batches: Sequence[int] = ()) -> list[dict[str, Any]]:
        """``train_summary.json``'s ``data_sets``: each set's name, training samples (repeats counted), batch
        probability, loss factor and the micro-batches it gave (``batches``, per process)."""
        counts = [0] * len(self.names)
        for s in self.of_sample:
            counts[s] += 1
        given = list(batches) + [0] * (len(self.names) - len(batches))
        return [
            {
                "name": n,
                "samples": counts[i],
                "weight": None if self.weights is None else self.weights[i],
                "loss_weight": self.prior_loss_weight if self.reg and self.reg[i] else self.loss_weights[i],
                "batches": given[i],
                **({"is_reg": True} if self.reg and self.reg[i] else {}),
            }
            for i, n in enumerate(self.names)
        ]


def batch_order(data: Any, batch_size: int, **order: Any) -> EpochBatches | PairedBatches:
    """The run's batch order over ``data`` (a :class:`~dit_lora.data.prepared_data.PreparedData`; ``order``: seed, rank,
    world_size, random_flip, caption_dropout): :class:`~dit_lora.data.batches.EpochBatches` over its training
    samples, weighted by its sets, and with class images each batch paired with a batch of them
    (:func:`~dit_lora.data.batches.paired_order`)."""
    sets: SetMix | None = data.sets
    start = sets.prior_start if sets is not None else None
    count = len(data) if start is None else start
    groups = data.groups[:count] if data.groups is not None else None
    main = EpochBatches(
        count,
        batch_size,
        groups=groups,
        sets=sets.of_sample[:count] if sets is not None else None,
        set_weights=sets.weights if sets is not None else None,
        set_names=sets.names if sets is not None else None,
        **order,
    )
    if start is None:
        return main
    class_groups = data.groups[start:] if data.groups is not None else None
    return paired_order(main, class_groups, len(data) - start, offset=start)


class SetsMedia:
    """A :class:`~dit_lora.data.prepared_data.MediaHandler` over several sets, one family handler each (see the module)."""

    def __init__(self, cfg: TrainConfig, spec: FamilySpec, make: Callable[[TrainConfig], Any] | None = None) -> None:
        assert has_sets(cfg.data), "SetsMedia reads --dataset_config or --with_prior_preservation's class images"
        self.cfg, self.spec = cfg, spec
        self.sets, self.note = run_sets(cfg, frames=spec.video_frames)
        self.class_listed = 0  # the class images --class_data_dir holds (list_samples counts them)
        make = make or (lambda c: spec.data.data_handler(c, spec))
        self.configs = [set_config(cfg, s) for s in self.sets]
        self.children = [make(c) for c in self.configs]
        refused = refusal(spec, self.children[0])
        if refused:
            raise UserError(refused)
        first = self.children[0]
        self.noun, self.cacheable = first.noun, first.cacheable
        self.encode_batch_size = first.encode_batch_size
        self.collate = first.collate

    def mix(self, samples: Sequence[Any]) -> SetMix:
        """The :class:`SetMix` of the training ``samples``."""
        weights = None
        if self.sets[0].weight is not None:
            total = sum(s.weight or 0.0 for s in self.sets)
            weights = tuple((s.weight or 0.0) / total for s in self.sets)
        names, loss_weights = tuple(s.name for s in self.sets), tuple(s.loss_weight for s in self.sets)
        reg = tuple(s.is_reg for s in self.sets)
        mix = SetMix(names, weights, loss_weights, (), reg, self.cfg.data.prior_loss_weight)
        return mix.for_samples(samples)

    def is_reg(self, sample: Any) -> bool:
        """Whether ``sample`` is a class image of prior preservation."""
        return self.sets[int(getattr(sample, "data_set", 0))].is_reg

    def _header(self, k: int) -> str:
        s = self.sets[k]
        extras = [plural(s.repeats, "repeat")] if s.repeats > 1 else []
        extras += [f"weight {s.weight:g}"] if s.weight is not None else []
        extras += [f"loss weight {s.loss_weight:g}"] if s.loss_weight != 1.0 else []
        extras += [f"class images, loss weight {self.cfg.data.prior_loss_weight:g}"] if s.is_reg else []
        run_sizes = [f"--{n}" for n in FRAME_SIZES if getattr(self.cfg.video, n) is not None]
        if s.options.get("frame_buckets") and run_sizes:
            extras.append(f"its own frame buckets in place of the run's {'/'.join(run_sizes)}")
        for name, words in yielded(self.cfg.is_set, s).items():
            extras.append(f"the run's --{name} {self.cfg.option(name)} in place of {words}")
        fitted = fitted_line(s)
        extras += [fitted] if fitted else []
        taken = self.cfg.data.num_class_images
        if s.is_reg and self.class_listed > taken:
            extras.append(f"the first {taken} of its {self.class_listed}, your own first (--num_class_images)")
        said = f" ({', '.join(extras)})" if extras else ""
        return f"data set {k + 1}/{len(self.sets)} `{s.name}`: {s.source}{said}"

    def _which(self, k: int) -> str:
        """How a paragraph names set ``k``: of the dataset config, or prior preservation's class images."""
        data_set = self.sets[k]
        if data_set.is_reg and self.cfg.data.with_prior_preservation:
            return f"The class images of --with_prior_preservation (--class_data_dir `{self.cfg.data.class_data_dir}`)"
        if not self.cfg.data.dataset_config:
            return f"The training data ({data_set.source})"
        return f"Data set {k + 1} (`{data_set.name}`) of the dataset config `{self.cfg.data.dataset_config}`"

    def _in_set_terms(self, k: int, text: str) -> str:
        """``text`` (the family handler's paragraph or log line about set ``k``) with the set's options named as its
        file writes them, not as flags (:func:`~dit_lora.config.set_keys.in_set_terms`): a flag would not reach the
        set, whose own key wins. Unchanged for the run's own data; --with_prior_preservation's class images are named
        by the flags that give them (:data:`CLASS_FLAGS`: their captions are --class_prompt's, not the instance
        prompt's)."""
        path = self.cfg.data.dataset_config
        data_set = self.sets[k]
        if data_set.is_reg and self.cfg.data.with_prior_preservation:
            for option, flag in CLASS_FLAGS.items():
                text = re.sub(rf"--{option}\b", flag, text)
            return text
        if not path:
            return text
        toml = str(path).lower().endswith(".toml")
        return in_set_terms(text, SET_OPTIONS, data_set.keys, toml=toml, choices=_SET_CHOICES)

    def _set_log(self, k: int, log: Callable[[str], Any]) -> Callable[[str], Any]:
        """``log`` for set ``k``'s handler: its lines in the set's terms (:meth:`_in_set_terms`)."""
        return lambda line: log(self._in_set_terms(k, line))

    @contextlib.contextmanager
    def _naming_the_set(self, k: int) -> Iterator[None]:
        """A set's listing, screening or checking paragraph, said to be about that set of the dataset config, its
        options named as the set's keys."""
        try:
            yield
        except UserError as err:
            raise UserError(f"{self._which(k)} cannot be used: {self._in_set_terms(k, str(err))}") from None

    def _say_sample_size(self, log: Callable[[str], Any]) -> None:
        """The validation samples' size (:func:`sample_config`), said once when the run makes any."""
        if self.cfg.data.dataset_config and self.cfg.validation.prompts:
            line = sample_config(self.cfg, self.spec)[1]
            if line:
                log(line)

    def list_samples(self) -> list:
        """Every set's samples, each tagged with its set and its name-prefixed key, a set's repeats as copies,
        numbered 0..N-1 over all sets."""
        out: list = []
        for k, (data_set, child) in enumerate(zip(self.sets, self.children)):
            with self._naming_the_set(k), listing.rewritten(lambda line: self._in_set_terms(k, line)):  # noqa: B023
                found = child.list_samples()
            if data_set.is_reg and self.cfg.data.with_prior_preservation:  # --class_data_dir's first class images
                self.class_listed = len(found)  # said in the set's header when more than are taken
                found = class_images.users_first(found)[: self.cfg.data.num_class_images]
            listed = [dataclasses.replace(s, data_set=k, key=f"{data_set.name}/{s.key}") for s in found]
            for s in listed:
                out.append(s)
                out.extend(dataclasses.replace(s, repeat=s.repeat + j * _SET_COPY) for j in range(1, data_set.repeats))
        return [dataclasses.replace(s, index=i) for i, s in enumerate(out)]

    def _parts(self, samples: Sequence[Any]) -> list[list[int]]:
        """The positions in ``samples`` of each set's samples, in order."""
        parts: list[list[int]] = [[] for _ in self.sets]
        for i, s in enumerate(samples):
            parts[int(getattr(s, "data_set", 0))].append(i)
        return parts

    def screen(self, samples: list, *, log: Callable[[str], Any], quarantine: list[dict[str, Any]]) -> list:
        """Each set screened by its own handler (its bucket table logged under its header)."""
        usable: list = []
        if self.note:  # what of another trainer's file was left out
            log(self.note)
        self._say_sample_size(log)
        for k, part in enumerate(self._parts(samples)):
            log(self._header(k))
            with self._naming_the_set(k):
                kept = self.children[k].screen(
                    [samples[i] for i in part], log=self._set_log(k, log), quarantine=quarantine
                )
            if part and not kept:
                raise UserError(
                    f"{self._which(k)} has no usable sample: all {len(part)} were left out (each named with its reason "
                    "in quarantine.json in the output folder). Fix them, or remove the set."
                )
            usable += kept
        return usable

    def check(self, samples: list, *, log: Callable[[str], Any]) -> tuple[list, list, str | None]:
        """``check-data``: each set checked by its own handler."""
        rows: list = []
        usable: list = []
        notes: list[str] = []
        if self.note:
            log(self.note)
        self._say_sample_size(log)
        for k, part in enumerate(self._parts(samples)):
            log(self._header(k))
            with self._naming_the_set(k):
                r, u, note = self.children[k].check([samples[i] for i in part], log=self._set_log(k, log))
            rows, usable = rows + r, usable + u
            notes += [f"`{self.sets[k].name}`: {note}"] if note else []
        return rows, usable, "\n".join(notes) or None

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        """The first set's (each set's entries are named in its own namespace: :meth:`cache_files`)."""
        return self.children[0].namespace_identity(comps)

    def namespaces(self, comps=None) -> list[str]:
        """Each set's cache namespace."""
        return [cache_namespace(child.namespace_identity(comps)) for child in self.children]

    def cache_files(self, root: Path, comps, samples: Sequence[Any]) -> tuple[Path, list[Path]]:
        """(the first set's cache folder, every sample's cache file in its set's namespace)."""
        namespaces = self.namespaces(comps)
        files: list[Path | None] = [None] * len(samples)
        for k, part in enumerate(self._parts(samples)):
            for i, path in zip(part, cache_files(root, namespaces[k], [samples[i] for i in part])):
                files[i] = path
        return Path(root) / namespaces[0], [f for f in files if f is not None]

    def pixel_loader(self, samples: list) -> Callable[[int], Any]:
        """Each sample's pixels as its set's handler prepares them."""
        loaders = [child.pixel_loader(samples) for child in self.children]
        return lambda i: loaders[int(getattr(samples[i], "data_set", 0))](i)

    def raw_dataset(self, samples: list) -> torch.utils.data.Dataset:
        """The uncached dataset: each item read by its set's dataset."""
        return _SetsDataset([child.raw_dataset(samples) for child in self.children], samples)

    def groups(self, samples: list, **kwargs: Any) -> list[int]:
        """Each set's groups (its buckets) numbered apart, so that a batch never mixes sets."""
        groups = [0] * len(samples)
        offset = 0
        for k, part in enumerate(self._parts(samples)):
            own = self.children[k].groups([samples[i] for i in part], **kwargs) if part else None
            own = own if own is not None else [0] * len(part)
            for i, g in zip(part, own):
                groups[i] = offset + g
            offset += max(own, default=-1) + 1
        return groups

    def for_source(self, cfg: TrainConfig):
        """The held-out folder (``--validation_data_dir``) read by the first set's handler, with its options."""
        return handler_for_source(self.children[0], folder_config(self.configs[0]))


class _SetsDataset(torch.utils.data.Dataset):
    """Items of several sets' datasets (each over every sample, indexed alike), each read by its own set's."""

    def __init__(self, datasets: list[torch.utils.data.Dataset], samples: list) -> None:
        self.datasets = datasets
        self.of_sample = [int(getattr(s, "data_set", 0)) for s in samples]

    def __len__(self) -> int:
        return len(self.of_sample)

    def __getitem__(self, item):
        return self.datasets[self.of_sample[unpack_item(item)[0]]][item]


def sets_media(cfg: TrainConfig, spec: FamilySpec) -> SetsMedia | None:
    """The run's :class:`SetsMedia` when it reads sets (a dataset config, or class images), else None."""
    return SetsMedia(cfg, spec) if has_sets(cfg.data) else None
