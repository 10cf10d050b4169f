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


def tensorboard_events(out) -> dict:
    """What TensorBoard reads from the run's event files: {"images": {tag: [(step, PIL image)]}, "scalars":
    {tag: [(step, value)]}, "texts": {tag: [(step, text)]}}, over every event folder under ``out/logs``."""
    import io

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    from tensorboard.plugins.hparams import plugin_data_pb2

    found: dict = {"images": {}, "scalars": {}, "texts": {}, "options": {}}
    for folder in sorted({p.parent for p in (out / "logs").rglob("events.out.tfevents.*")}):
        events = EventAccumulator(str(folder), size_guidance={"images": 0, "tensors": 0, "scalars": 0})
        events.Reload()
        try:
            hparams = events.PluginTagToContent("hparams").values()
        except KeyError:  # a folder without them
            hparams = []
        for content in hparams:
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            if data.HasField("session_start_info"):  # the run's options (accelerate's tracker: add_hparams)
                found["options"].update({k: v.string_value for k, v in data.session_start_info.hparams.items()})
        for tag in events.Tags()["images"]:
            found["images"][tag] = [(e.step, Image.open(io.BytesIO(e.encoded_image_string)))
                                    for e in events.Images(tag)]
        for tag in events.Tags()["scalars"]:
            found["scalars"][tag] = [(e.step, e.value) for e in events.Scalars(tag)]
        for tag in events.Tags()["tensors"]:
            found["texts"][tag] = [(e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode())
                                   for e in events.Tensors(tag)]
    return found


@pytest.mark.slow
def test_sana_samples_each_prompt_with_its_own_seed_and_writes_a_grid(tiny_sana, shapes_data, tmp_path):
    prompts = ["a red circle", "a blue square on a green background"]
    flags = dict(FLAGS, report_to="tensorboard", validation_split=0.25)  # a held-out loss too
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path / "two", validation_prompt=" ::: ".join(prompts),
                                    **flags)
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

    # TensorBoard holds each prompt's images at the step they were drawn, the prompts, and the held-out loss
    logged = tensorboard_events(out)
    for section, step in (("validation", 2), ("final", 3)):
        tag = "final" if section == "final" else "step2"
        for k in range(2):
            (got_step, image), = logged["images"][f"{section}/p{k}"]
            assert got_step == step and np.array_equal(np.asarray(image.convert("RGB"), dtype=np.int16),
                                                       _pixels(samples / f"{tag}_p{k}_0.png"))
        (_, text), = logged["texts"][f"{section}/prompts/text_summary"]
        assert prompts[1] in text
    assert [s for s, _ in logged["scalars"]["validation_loss"]] == [0, 2, 3]  # before the first update too
    assert any(s == 3 for s, _ in logged["scalars"]["loss"])
    assert logged["options"]["rank"] == "4" and logged["options"]["validation_prompt"] == " ::: ".join(prompts)

    # the first prompt draws what a run with that prompt alone draws (same weights, same seed)
    alone, alone_out = train_in_process(tiny_sana, shapes_data, tmp_path / "one", validation_prompt=prompts[0],
                                        **flags)
    assert isinstance(alone, dict) and alone["status"] == "completed", alone
    assert np.array_equal(_pixels(alone_out / "samples" / "final_0.png"), _pixels(samples / "final_p0_0.png"))


@pytest.mark.slow
def test_a_video_family_writes_one_clip_per_prompt_and_no_grid(tiny_cogvideox, tmp_path):
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    clips = make_moving_square_dataset(tmp_path / "clips", n=4, num_frames=9, seed=3, layout="metadata")
    summary, out = train_in_process(tiny_cogvideox, clips, tmp_path, family="cogvideox", train_batch_size=2,
                                    resolution=None, center_crop=None, report_to="tensorboard",
                                    validation_prompt="a red square ::: a blue square", **FLAGS)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    names = sorted(p.name for p in (out / "samples").iterdir())
    assert names == ["final_p0_0.mp4", "final_p1_0.mp4", "step2_p0_0.mp4", "step2_p1_0.mp4"]
    # TensorBoard shows each prompt's clip as an animation of its frames
    import av

    logged = tensorboard_events(out)
    for section, step, tag in (("validation", 2, "step2"), ("final", 3, "final")):
        for k in range(2):
            (got_step, gif), = logged["images"][f"{section}/p{k}"]
            with av.open(str(out / "samples" / f"{tag}_p{k}_0.mp4")) as clip:
                frames = sum(1 for _ in clip.decode(video=0))
            assert got_step == step and gif.format == "GIF" and gif.n_frames == frames


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
