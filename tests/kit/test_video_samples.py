"""kit/video_samples.py: the video families' validation videos, one way: the in-memory pipeline
without text encoders, the cached embeddings repeated once per video, the first bucket's size, the family's own
arguments; the reloaded pipeline from one prompt per video; mp4 at the family's rate."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.video_samples import VideoSamples
from config_stand_in import stand_in


class Pipeline:
    """Records how it was built and called; returns one 'video' per prompt."""

    def __init__(self, **parts) -> None:
        self.parts, self.calls = parts, []
        self.transformer = SimpleNamespace(device=torch.device("cpu"))

    def set_progress_bar_config(self, disable: bool) -> None:
        self.quiet = disable

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        count = len(kwargs["prompt"]) if "prompt" in kwargs else kwargs["prompt_embeds"].shape[0]
        return SimpleNamespace(frames=[f"video {i}" for i in range(count)])


class Samples(VideoSamples, DiffusionSamples):
    frames_keyword = "frames"
    fixed_kwargs = {"output_type": "pil", "binning": False}
    built: list = []

    def video_size(self, cfg):
        return 9, 64, 96

    def fps(self, cfg):
        return 12

    def pipeline_class(self):
        def build(**parts):
            self.built.append(Pipeline(**parts))
            return self.built[-1]

        return build

    def sampler(self, comps):
        return "sampler"

    def in_memory_kwargs(self, comps, cond, cfg, n):
        return {"negative_prompt": None}

    def reloaded_kwargs(self, pipe, cfg, n, comps):
        return {"max_sequence_length": 7}


def test_the_in_memory_pipeline_repeats_the_cached_embeddings_once_per_video():
    vae = SimpleNamespace(device="cpu", to=lambda device: None)
    comps = Components(model=None, encoders={"vae": vae})
    model = torch.nn.Linear(2, 2)
    cond = {"prompt_embeds": torch.ones(1, 4, 8), "negative_prompt_embeds": torch.zeros(1, 4, 8), "other": 1}
    cfg = stand_in(num_validation_images=3, validation_inference_steps=2, validation_guidance_scale=5.0)
    videos = Samples(None, None).generate(comps, model, cond, cfg, seed=0)
    pipe = Samples.built[-1]
    assert videos == ["video 0", "video 1", "video 2"] and pipe.quiet
    assert pipe.parts == {"tokenizer": None, "text_encoder": None, "vae": vae, "scheduler": "sampler",
                          "transformer": model}
    (call,) = pipe.calls
    assert call["prompt_embeds"].shape == (3, 4, 8) and call["negative_prompt_embeds"].shape == (3, 4, 8)
    assert "other" not in call and call["negative_prompt"] is None
    assert {k: call[k] for k in ("frames", "height", "width", "num_inference_steps", "guidance_scale", "binning")} == {
        "frames": 9, "height": 64, "width": 96, "num_inference_steps": 2, "guidance_scale": 5.0, "binning": False}


def test_the_reloaded_pipeline_takes_one_prompt_per_video_and_videos_are_mp4(tmp_path, monkeypatch):
    pipe = Pipeline()
    cfg = stand_in(validation_inference_steps=2, validation_guidance_scale=5.0)
    assert Samples(None, None).generate_with_pipeline(pipe, "a cat", cfg, seed=0, num_images=2) == ["video 0", "video 1"]
    assert pipe.calls[0]["prompt"] == ["a cat", "a cat"] and pipe.calls[0]["max_sequence_length"] == 7
    written = {}
    monkeypatch.setattr("dit_lora.kit.video_samples.write_video",
                        lambda frames, path, fps: written.update(path=path, fps=fps) or path)
    Samples(None, None).save_sample(["frame"], tmp_path / "step_10", cfg)
    assert written == {"path": tmp_path / "step_10.mp4", "fps": 12}


def test_the_size_rate_and_pipeline_are_the_tasks_by_default():
    """Built with its task and encoders (``class WanSamples(VideoSamples, DiffusionSamples)``): the task's first
    bucket, its rate in whole frames per second, its pipeline; the encoders go to the kit base."""

    class TaskSamples(VideoSamples, DiffusionSamples):
        pass

    task = SimpleNamespace(video_buckets=lambda cfg: [(9, 64, 96), (17, 32, 32)], model_fps=lambda model: 15.6,
                           pipeline_class=lambda: "Pipeline")
    samples = TaskSamples(task, "encoders")
    assert samples.task is task and samples.encoders == "encoders"
    assert (samples.video_size(None), samples.fps(SimpleNamespace(model=None)), samples.pipeline_class()) == ((9, 64, 96), 16, "Pipeline")
