"""kit/info_cache.py: a checkpoint's configs read once per model, again when the folder changed or
after forget()."""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from config_stand_in import stand_in

from dit_lora.core.errors import UserError
from dit_lora.kit.components import DiffusionNotes
from dit_lora.kit.info_cache import ClipGeometry, InfoCache, VideoNotes, VideoTask, clip_geometry


def test_read_once_per_model_and_again_after_a_rebuild_or_forget(tmp_path):
    (tmp_path / "model_index.json").write_text("{}")
    reads = []
    cache = InfoCache(lambda model: reads.append(model.pretrained_model_name_or_path) or len(reads))
    model = SimpleNamespace(pretrained_model_name_or_path=str(tmp_path), revision=None, family="wan")
    assert cache(model) == 1 and cache(model) == 1
    os.utime(tmp_path / "model_index.json", ns=(1, 1))
    assert cache(model) == 2
    cache.forget()
    assert cache(model) == 3


def test_clip_geometry_reads_the_vae_and_patch_and_defaults_when_unreadable():
    read = clip_geometry({"patch_size": [1, 2, 2]}, {"z_dim": 48, "scale_factor_spatial": 16}, {})
    assert read == {"z_dim": 48, "vae_spatial": 16, "vae_temporal": 4, "patch": (1, 2, 2), "num_train_timesteps": 1000}
    assert ClipGeometry(**read).size_multiple == 32
    assert clip_geometry({"patch_size": 2}, {}, {"num_train_timesteps": 500})["patch"] == (1, 2, 2)  # spatial only
    assert ClipGeometry(**clip_geometry({}, {}, {})) == ClipGeometry()


@dataclass(frozen=True)
class Facts(ClipGeometry):
    fps: int = 24

    def trained_size(self):
        return 9, 64, 96, "why"


@dataclass(frozen=True)
class Task(VideoTask):
    infos, label = InfoCache(lambda model: Facts()), "Model"


def _sizes(**values):
    sizes = {"frame_buckets": None, "max_num_frames": None, "height": None, "width": None, **values}
    return stand_in(pretrained_model_name_or_path="no/such-model", revision=None, **sizes)


def test_a_video_task_reads_its_facts_once_and_gives_buckets_rate_and_pipeline():
    task = Task(name="t", task="t2v", pipeline_class_name="WanPipeline")
    assert task.video_buckets(_sizes())[0] == (9, 64, 96) and task.model_fps(_sizes().model) == 24
    assert task.pipeline_class().__name__ == "WanPipeline"
    with pytest.raises(UserError, match="--height 72 must be a multiple of 16 for this Model checkpoint"):
        task.video_buckets(_sizes(height=72))


def test_the_task_says_how_image_to_video_trains_its_first_frame():
    assert Task(name="t", task="t2v", pipeline_class_name="WanPipeline").mode == "text-to-video"
    assert Task(name="i", task="i2v", pipeline_class_name="WanPipeline").mode == (
        "image-to-video (first latent frame clean, timestep 0, out of the loss)")


@dataclass(frozen=True)
class Described(Facts):
    def describe(self):
        return "Toy 1B"


@dataclass(frozen=True)
class DescribedTask(VideoTask):
    infos, label = InfoCache(lambda model: Described()), "Model"


def test_the_video_notes_say_the_model_task_size_and_rate():
    notes = VideoNotes(DescribedTask(name="t", task="i2v", pipeline_class_name="WanPipeline"))
    line = notes.trained_note(_sizes(frame_buckets="9x64x96"))
    assert line == (
        "model: Toy 1B; image-to-video (first latent frame clean, timestep 0, out of the loss); training size 9x64x96 "
        "(frames x height x width) at 24 fps"
    )
    own = notes.trained_note(_sizes(frame_buckets="9x64x96"), rate="; positions at each clip's own frame rate")
    assert own.endswith("(frames x height x width); positions at each clip's own frame rate")
    assert DiffusionNotes.start_notes is VideoNotes.start_notes  # a family adds its own lines
