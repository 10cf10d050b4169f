"""dit_lora.output.samples: each prompt's validation samples under their names, and the grid of several prompts."""

from __future__ import annotations

import numpy as np
from PIL import Image

from dit_lora.output.samples import prompt_grid, sample_stem, save_prompt_samples


def _save_png(item, stem):
    path = stem.with_suffix(".png")
    item.save(path)
    return path


def _solid(color, size=(32, 24)):
    return Image.new("RGB", size, color)


def test_one_prompt_keeps_the_names_runs_have_always_written(tmp_path):
    files = save_prompt_samples(_save_png, tmp_path, "final", ["a cat"], [[_solid("red"), _solid("blue")]])
    assert [f.name for f in files] == ["final_0.png", "final_1.png"]
    assert not (tmp_path / "final_grid.png").exists()


def test_several_prompts_name_each_sample_by_its_prompt_and_write_a_grid_first(tmp_path):
    made = [[_solid("red"), _solid("green")], [_solid("blue"), _solid("yellow")]]
    files = save_prompt_samples(_save_png, tmp_path, "step4_ema", ["a cat", "a dog"], made)
    assert [f.name for f in files] == ["step4_ema_grid.png", "step4_ema_p0_0.png", "step4_ema_p0_1.png",
                                       "step4_ema_p1_0.png", "step4_ema_p1_1.png"]
    assert np.asarray(Image.open(tmp_path / "step4_ema_p1_0.png"))[0, 0].tolist() == [0, 0, 255]


def test_the_grid_puts_each_prompts_images_in_its_row_with_the_prompt_written_under_them():
    made = [[_solid("red"), _solid("green")], [_solid("blue")]]
    grid = np.asarray(prompt_grid(["a red and a green square", "a blue one"], made))
    rows = [grid[:, x] for x in (4 + 16, 4 + 32 + 4 + 16)]  # the middle of each column
    first = next(y for y in range(grid.shape[0]) if rows[0][y].tolist() == [255, 0, 0])
    assert rows[1][first].tolist() == [0, 128, 0]  # green beside red, in the first prompt's row
    band = grid[first + 24 + 4 : first + 24 + 4 + 15]  # under the first row: the prompt's text, dark pixels
    assert (band.min(axis=-1) < 128).any()
    blue_rows = [y for y in range(grid.shape[0]) if rows[0][y].tolist() == [0, 0, 255]]
    assert blue_rows and blue_rows[0] > first + 24 + 15  # the second prompt's row below the first's text
    assert (rows[1][blue_rows[0]] == 255).all()  # one image in that row: white beside it


def test_a_long_prompt_is_wrapped_and_cut_not_drawn_off_the_grid():
    from dit_lora.output import samples

    long = "word " * 400
    lines = samples._wrapped(long.strip(), 20)
    assert len(lines) == samples._MAX_LINES and lines[-1].endswith("...") and all(len(x) <= 20 for x in lines)
    grid = prompt_grid([long, "short"], [[_solid("red")], [_solid("blue")]])
    assert grid.height < 2 * (24 + 4 + samples._MAX_LINES * samples._LINE_HEIGHT + 8) + 8


def test_clips_and_answers_get_no_grid(tmp_path):
    assert prompt_grid(["a", "b"], [["an answer"], ["another"]]) is None
    frames = [[[_solid("red")] * 3], [[_solid("blue")] * 3]]  # a clip: a list of frames
    assert prompt_grid(["a", "b"], frames) is None


def test_sample_stem(tmp_path):
    assert sample_stem(tmp_path, "t", 1, 2, several=True) == tmp_path / "t_p1_2"
    assert sample_stem(tmp_path, "t", 0, 2, several=False) == tmp_path / "t_2"
