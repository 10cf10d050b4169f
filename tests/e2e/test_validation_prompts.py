"""Several validation prompts (issue 49): each prompt sampled with its own seed during training and at the end, an
image family's prompts in one grid besides each prompt's images, a video family's clip per prompt, a class-conditional
family's class names checked in every prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from helpers import train_in_process

#: a short run that validates once during training (at update 2) and at the end
FLAGS = dict(max_train_steps=3, validation_steps=2, num_validation_images=1, validation_inference_steps=2,
             lr_warmup_steps=0)


def _pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)


@pytest.mark.slow
def test_sana_samples_each_prompt_with_its_own_seed_and_writes_a_grid(tiny_sana, shapes_data, tmp_path):
    prompts = ["a red circle", "a blue square on a green background"]
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path / "two",
                                    validation_prompt=" ::: ".join(prompts), **FLAGS)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    samples = out / "samples"
    for tag in ("step2", "final"):
        first, second = _pixels(samples / f"{tag}_p0_0.png"), _pixels(samples / f"{tag}_p1_0.png")
        assert first.shape == second.shape and not np.array_equal(first, second)
        grid = _pixels(samples / f"{tag}_grid.png")
        height, width = first.shape[:2]
        assert grid.shape[1] == width + 8 and grid.shape[0] > 2 * height  # one column, two rows and their text
        top = grid[4 : 4 + height, 4 : 4 + width]
        assert np.array_equal(top, first)  # the first prompt's image heads the grid
    assert not (samples / "final_0.png").exists()  # the one-prompt name is not written beside them
    assert [f.split("/")[-1] for f in summary["samples"]][:1] == ["final_grid.png"]
    card = (out / "README.md").read_text()
    assert json.dumps(prompts[0]) in card  # the card's snippet samples the first prompt

    # the first prompt draws what a run with that prompt alone draws (same weights, same seed)
    alone, alone_out = train_in_process(tiny_sana, shapes_data, tmp_path / "one", validation_prompt=prompts[0],
                                        **FLAGS)
    assert isinstance(alone, dict) and alone["status"] == "completed", alone
    assert np.array_equal(_pixels(alone_out / "samples" / "final_0.png"), _pixels(samples / "final_p0_0.png"))


@pytest.mark.slow
def test_a_video_family_writes_one_clip_per_prompt_and_no_grid(tiny_cogvideox, tmp_path):
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    clips = make_moving_square_dataset(tmp_path / "clips", n=4, num_frames=9, seed=3, layout="metadata")
    summary, out = train_in_process(tiny_cogvideox, clips, tmp_path, family="cogvideox", train_batch_size=2,
                                    resolution=None, center_crop=None,
                                    validation_prompt="a red square ::: a blue square", **FLAGS)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    names = sorted(p.name for p in (out / "samples").iterdir())
    assert names == ["final_p0_0.mp4", "final_p1_0.mp4", "step2_p0_0.mp4", "step2_p1_0.mp4"]


@pytest.mark.slow
def test_dit_checks_the_class_names_of_every_prompt(tiny_dit, shape_classes, tmp_path):
    """DiT's prompts are class names: the second prompt's unknown class is refused before training, naming it."""
    from dit_lora.core.errors import UserError

    err, _ = train_in_process(tiny_dit, shape_classes, tmp_path / "bad", family="dit",
                              num_classes=3, validation_prompt="circle ::: hexagon", **FLAGS)
    assert isinstance(err, UserError) and "'hexagon'" in str(err) and "'circle'" not in str(err)
    summary, out = train_in_process(tiny_dit, shape_classes, tmp_path / "good", family="dit",
                                    num_classes=3, validation_prompt="circle ::: square, triangle", **FLAGS)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert (out / "samples" / "final_grid.png").is_file() and (out / "samples" / "final_p1_0.png").is_file()
