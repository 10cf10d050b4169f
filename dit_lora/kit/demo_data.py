"""What every family's ``--demo`` shares: the nearest sizes a refused ``--resolution`` is told to use, the
synthetic data drawn into an empty ``--train_data_dir`` (a folder the user filled is trained on as it is, and
said), the tiny model's build refused where a folder of another's stands, a video family's clips, and an edit
model's control images beside the shapes.

A family states only what differs: its stride, its refusal's reason, its data set's marker and how it draws it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dit_lora.core.errors import UserError
from dit_lora.data.synthetic import is_user_folder
from dit_lora.data.synthetic.clips import build_demo_clips
from dit_lora.data.synthetic.shapes import SHAPES_MARKER, make_shapes_dataset

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig
    from dit_lora.contract.capabilities import VideoFrames


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


def build_demo_model(build: Callable[[], object]) -> None:
    """``build()`` the tiny model ``--demo`` trains; a folder the tiny builder did not make (its
    ``FileExistsError``: nothing of the user's is overwritten) is refused in one paragraph naming the flag to change."""
    try:
        build()
    except FileExistsError as err:
        raise UserError(f"--demo: {err}. Choose another --pretrained_model_name_or_path for the demo model.")


def demo_clips(
    cfg: TrainConfig, video: VideoFrames, size: int, fps: int, sound: str = "none", references: bool = False
) -> None:
    """Into ``--train_data_dir`` (when one is given), the demo's moving-square clips: as many frames as the run's
    longest bucket (``video``'s), ``size`` px square (the tiny model's geometry), written at ``fps``; ``sound``: their
    audio tracks (``"mixed"``: a tone on every other clip, :func:`~dit_lora.data.synthetic.clips.make_moving_square_dataset`);
    ``references``: each clip's reference clip (its square's outline, named in ``reference_path``)."""
    if cfg.data.train_data_dir:
        frames = max(b[0] for b in video.video_buckets(cfg))
        build_demo_clips(
            cfg.data.train_data_dir,
            n=cfg.model.demo_num_images,
            num_frames=frames,
            size=size,
            fps=fps,
            sound=sound,
            references=references,
        )


def add_control_images(folder: str | Path, per_sample: int = 1) -> Path:
    """Give every row of a shapes data set's ``metadata.jsonl`` ``per_sample`` control images (``controls/``: the
    image in grey, then mirrored), named in its ``control_image`` column (a list for several): an edit data set (Qwen-Image-Edit, FLUX.1 Kontext)."""
    from PIL import Image, ImageOps

    folder = Path(folder)
    rows = [json.loads(line) for line in (folder / "metadata.jsonl").read_text().splitlines() if line.strip()]
    (folder / "controls").mkdir(exist_ok=True)
    for row in rows:
        stem = Path(row["file_name"]).stem
        with Image.open(folder / row["file_name"]) as image:
            made = [ImageOps.grayscale(image).convert("RGB"), ImageOps.mirror(image.convert("RGB"))][:per_sample]
        names = []
        for index, control in enumerate(made):
            name = f"controls/{stem}_{index}.png"
            control.save(folder / name, format="PNG", optimize=False, compress_level=6)
            names.append(name)
        row["control_image"] = names[0] if per_sample == 1 else names
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder
