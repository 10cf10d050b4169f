"""What every image family's ``--demo`` shares: the nearest sizes a refused ``--resolution`` is told to use, and
the synthetic data drawn into an empty ``--train_data_dir`` (a folder the user filled is trained on as it is,
and said).

A family states only what differs: its stride, its refusal's reason, its data set's marker and how it draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dit_lora.data.synthetic import is_user_folder
from dit_lora.data.synthetic.shapes import SHAPES_MARKER, make_shapes_dataset

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def nearest_sizes(resolution: int, multiple: int) -> str:
    """The multiples of ``multiple`` either side of ``resolution`` (``"512 or 528"``; only the upper one below
    the first multiple), for a refusal's "Use ..."."""
    lower, upper = resolution // multiple * multiple, (resolution // multiple + 1) * multiple
    return f"{lower} or {upper}" if lower else str(upper)


def demo_data(cfg: TrainConfig, marker: str = SHAPES_MARKER, draw: Callable[[str], object] | None = None) -> bool:
    """Draw the demo data set into ``--train_data_dir`` (``draw``, else the shapes images at ``--resolution``):
    True when drawn. A folder holding the user's own data (no ``marker``) is kept as it is and said; no folder
    given, nothing is drawn."""
    directory = cfg.data.train_data_dir
    if directory and is_user_folder(directory, marker):
        print(f"--demo: --train_data_dir {directory} already holds data; training on it as it is", flush=True)
        return False
    if not directory:
        return False
    if draw is None:
        make_shapes_dataset(directory, n=cfg.model.demo_num_images, size=cfg.data.resolution, seed=0)
    else:
        draw(directory)
    return True
