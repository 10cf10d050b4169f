"""What :func:`~dit_lora.data.prepare.prepare_data` yields and asks: :class:`PreparedData` (what the loop trains
on), the :class:`MediaHandler` protocol a family's data answers, and the samples left out (:class:`LeftOut`, written
to ``quarantine.json`` by :func:`write_quarantine`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from dit_lora.core.collective import main_process_check
from dit_lora.core.fileio import reporting_disk_full, write_json_atomic
from dit_lora.data.data_sets import SetMix
from dit_lora.data.validation import bad_fraction_error
from dit_lora.output.names import QUARANTINE_FILE


@dataclass
class PreparedData:
    """What the loop trains on.

    ``dataset[i]`` belongs to ``samples[i]`` (a :class:`RawSample` for images, a
    :class:`~dit_lora.data.video.VideoSample` for clips); ``collate`` turns a list of ``dataset``
    items into a batch (the loop's loader and the recovery's replay both use it); every batch
    carries ``sample_index`` (a list of ints into ``samples``) so a bad step can be traced back to
    files. ``quarantine`` lists the samples left out, each as ``{"key": ..., "reason": ...}``. ``groups`` is None,
    or one group id per sample that a batch must not mix (a clip's frame bucket, when there are several):
    pass it to :class:`~dit_lora.data.batches.EpochBatches`. ``held_out``: the samples of the validation loss
    (:mod:`.held_out`), the same kind of data (read as ``dataset[(i, False)]``, batched by ``collate``), or None.
    """

    dataset: torch.utils.data.Dataset
    collate: Callable[[list[dict[str, Any]]], dict[str, Any]]
    samples: list
    cached: bool
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    groups: list[int] | None = None
    held_out: PreparedData | None = None
    #: the data sets of a dataset config (``--dataset_config``: each sample's set, batch probabilities, loss
    #: factors), or None for one data set
    sets: SetMix | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def cache_entries(self) -> list[Path]:
        """Every cache file a batch may read: the training samples', the held-out ones' and the empty caption's."""
        if not self.cached:
            return []
        held = getattr(self.held_out.dataset, "files", []) if self.held_out is not None else []
        empty = getattr(self.dataset, "empty_prompt", None)
        return [*getattr(self.dataset, "files", []), *held, *([empty] if empty is not None else [])]


class MediaHandler(Protocol):
    """What :func:`prepare_data` and ``check-data`` ask of a family's data (``family.data_handler(cfg)``)."""

    noun: str  #: what one sample is called in messages ("image", "clip")
    cacheable: bool  #: whether samples are encoded once into the latent cache (diffusion) or not (video LLMs)
    encode_batch_size: int  #: samples per encode call while caching (cacheable handlers only)

    def list_samples(self) -> list:
        """Every sample named by the data flags, unread."""

    def screen(self, samples: list, *, log: Callable[[str], Any], quarantine: list[dict[str, Any]]) -> list:
        """The usable samples; each left-out one is appended to ``quarantine`` with its reason."""

    def check(self, samples: list, *, log: Callable[[str], Any]) -> tuple[list, list, str | None]:
        """``check-data``: (per-sample rows, the usable samples, a note or None)."""

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        """Everything that changes an encoded sample besides its content (the cache namespace); ``comps``: the
        run's components (what the data stage decided, e.g. DiT's label map), None in ``check-data``."""

    def raw_dataset(self, samples: list) -> torch.utils.data.Dataset:
        """The uncached dataset."""

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """A batch of :meth:`raw_dataset` items (:func:`~dit_lora.data.batches.collate`, or padding of its own)."""

    def groups(self, samples: list, **kwargs: Any) -> list[int] | None:
        """One group id per sample that a batch must not mix (frame buckets), or None."""


@dataclass
class LeftOut:
    """The samples left out so far (``entries``, as ``quarantine.json`` lists them) and the limit they count against."""

    total: int  # files: a kohya repeat is screened, quarantined and counted once
    counted: str  # what ``total`` counts, as the refusal names it
    path: Path  # output_dir/quarantine.json
    limit: float  # --max_bad_samples_fraction
    entries: list[dict[str, Any]] = field(default_factory=list)

    def stop_if_too_many(self) -> None:
        """Raise the one-paragraph refusal when the left-out samples are above ``--max_bad_samples_fraction``."""
        error = bad_fraction_error(
            [(q["key"], q["reason"]) for q in self.entries],
            self.total,
            self.limit,
            what=self.counted,
            where=f" Every left-out sample and why: {self.path}.",
        )
        if error is not None:
            raise error


def write_quarantine(output_dir: str | Path, accelerator, quarantine: list[dict[str, Any]]) -> Path:
    """Write ``output_dir/quarantine.json`` (main process, atomic): every left-out sample with its reason."""
    path = Path(output_dir) / QUARANTINE_FILE
    advice = (
        "Nothing has been trained yet: free some space there or choose an --output_dir on a disk with room, "
        "and run the same command again."
    )

    def write() -> None:
        with reporting_disk_full("the list of left-out samples", path, advice=advice):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, quarantine)

    # Every rank learns of the main process's failure (a full disk), instead of waiting at the next collective.
    main_process_check(accelerator, write, what=f"writing {path}")
    return path
