"""dit_lora.training.tracker_media: validation samples to TensorBoard (read back from its event files) and wandb."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace

from PIL import Image

from dit_lora.training import tracker_media
from dit_lora.training.tracker_media import MAX_GIF_FRAMES, gif_bytes, log_samples, side_by_side


def _frames(n, size=(16, 8)):
    return [Image.new("RGB", size, (10 * i % 255, 0, 0)) for i in range(n)]


def test_a_clip_becomes_a_looping_gif_of_at_most_max_gif_frames_at_its_rate():
    short = Image.open(io.BytesIO(gif_bytes(_frames(9), fps=8)))
    assert short.format == "GIF" and short.n_frames == 9 and short.info["duration"] == 120 and short.info["loop"] == 0
    long = Image.open(io.BytesIO(gif_bytes(_frames(121), fps=24)))
    assert long.n_frames == len(range(0, 121, 3)) <= MAX_GIF_FRAMES and long.info["duration"] == 120  # every 3rd


def test_images_of_one_prompt_side_by_side():
    row = side_by_side([Image.new("RGB", (4, 6), "red"), Image.new("RGB", (5, 3), "blue")])
    assert row.size == (9, 6) and row.getpixel((6, 1)) == (0, 0, 255) and row.getpixel((6, 5)) == (255, 255, 255)


def test_answers_and_prompts_reach_tensorboard_as_text(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    tracker = SimpleNamespace(name="tensorboard", tracker=writer)
    log_samples(SimpleNamespace(trackers=[tracker]), "validation", ["what moves?", "what colour?"],
                [["a square moves right"], ["red"]], [], step=5)
    writer.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    events.Reload()
    text = {tag: tensor_util.make_ndarray(events.Tensors(tag)[0].tensor_proto).item().decode()
            for tag in events.Tags()["tensors"]}
    assert text["validation/p0/text_summary"] == "a square moves right" and "p1: what colour?" in text[
        "validation/prompts/text_summary"]
    assert all(e.step == 5 for tag in events.Tags()["tensors"] for e in events.Tensors(tag))


def test_wandb_gets_images_with_their_prompt_and_clips_from_their_mp4_files(monkeypatch):
    """wandb is not installed here: a stand-in module records what the calls would hand it (the real classes take
    a PIL image or an MP4 path with a caption, and ``Html`` a string)."""
    calls = []
    stand_in = SimpleNamespace(Image=lambda item, caption: ("image", item.size, caption),
                               Video=lambda path, caption: ("video", Path(path).name, caption),
                               Html=lambda html: ("html", html))
    monkeypatch.setitem(sys.modules, "wandb", stand_in)
    tracker = SimpleNamespace(name="wandb", log=lambda values, step: calls.append((values, step)))
    accelerator = SimpleNamespace(trackers=[tracker])
    log_samples(accelerator, "final", ["a", "b"], [[Image.new("RGB", (3, 2))], [Image.new("RGB", (4, 2))]], [], 7)
    log_samples(accelerator, "validation", ["a", "b"], [[_frames(3)], [_frames(3)]],
                [Path("s/step2_p0_0.mp4"), Path("s/step2_p1_0.mp4")], 2)
    log_samples(accelerator, "validation", ["q"], [["an answer"]], [Path("s/step2_0.txt")], 2)
    assert calls[0] == ({"final/p0": [("image", (3, 2), "a")], "final/p1": [("image", (4, 2), "b")]}, 7)
    assert calls[1] == ({"validation/p0": [("video", "step2_p0_0.mp4", "a")],
                         "validation/p1": [("video", "step2_p1_0.mp4", "b")]}, 2)
    assert calls[2] == ({"validation/p0": ("html", "<b>q</b>: an answer")}, 2)


def test_samples_no_tracker_shows_are_left_to_the_files():
    assert tracker_media._kind([object()]) is None and tracker_media._kind([]) is None
    log_samples(SimpleNamespace(trackers=[]), "validation", ["a"], [[object()]], [], 1)  # nothing to do, no error
