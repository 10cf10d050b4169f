"""What a video family reads from a checkpoint's small config files, read once: :class:`InfoCache`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from dit_lora.modelfiles.pipeline_files import read_once

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

T = TypeVar("T")

#: the files a pipeline folder's facts are read from (a rebuilt folder changes their modification times)
CONFIG_FILES = ("model_index.json", "transformer/config.json", "vae/config.json", "scheduler/scheduler_config.json")


class InfoCache(Generic[T]):
    """``read(cfg)``, once per model path, revision and (local folders) the modification times of ``files``
    (:func:`~dit_lora.modelfiles.pipeline_files.read_once`): a module-level cache, the spec's components hold no
    state."""

    def __init__(self, read: Callable[..., T], files: tuple[str, ...] = CONFIG_FILES) -> None:
        self.read, self.files = read, files
        self.seen: dict[tuple, T] = {}

    def __call__(self, cfg: TrainConfig) -> T:
        """What ``read`` returned for this model, read again only when the model changed."""
        return read_once(self.seen, cfg, self.files, self.read)

    def forget(self) -> None:
        """Drop the configs read so far (``--demo`` has just rewritten the model folder)."""
        self.seen.clear()
