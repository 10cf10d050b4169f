"""Other trainers' dataset files as their projects' docs and examples write them (issue 76), for the tests of
config/peer_simpletuner.py, peer_onetrainer.py, peer_diffusion_pipe.py, peer_files.py, peer_musubi.py,
peer_ai_toolkit.py and peer_datasets.py."""

from __future__ import annotations

import json

import yaml

#: SimpleTuner's documentation/quickstart/WAN.md example (verbatim but the folder)
SIMPLETUNER_WAN = [
    {"id": "disney-black-and-white", "type": "local", "dataset_type": "video", "crop": False, "resolution": 480,
     "minimum_image_size": 480, "maximum_image_size": 480, "target_downsample_size": 480,
     "resolution_type": "pixel_area", "cache_dir_vae": "cache/vae/wan/disney-black-and-white",
     "instance_data_dir": "datasets/disney-black-and-white", "disabled": False, "caption_strategy": "textfile",
     "metadata_backend": "discovery", "repeats": 0,
     "video": {"num_frames": 75, "min_frames": 75, "bucket_strategy": "aspect_ratio"}},
    {"id": "text-embeds", "type": "local", "dataset_type": "text_embeds", "default": True, "cache_dir": "cache/text/wan",
     "disabled": False, "write_batch_size": 128},
]


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


#: OneTrainer's current concept (a public training_concepts/concepts.json, version 1; trimmed of default image keys)
ONETRAINER_CONCEPT = {
    "__version": 1,
    "image": {"__version": 0, "enable_crop_jitter": True, "enable_random_flip": False,
              "enable_resolution_override": False, "resolution_override": "512"},
    "text": {"__version": 0, "prompt_source": "sample", "prompt_path": "", "enable_tag_shuffling": False,
             "tag_delimiter": ",", "keep_tags_count": 1},
    "name": "Training Images", "path": "training_data", "seed": -475655398, "enabled": True,
    "include_subdirectories": False, "image_variations": 1, "text_variations": 1, "balancing": 1.0,
    "balancing_strategy": "REPEATS", "loss_weight": 1.0,
}


#: diffusion-pipe's examples/dataset.toml (8f83dbf2, its comments trimmed)
DIFFUSION_PIPE_TOML = """
resolutions = [512]
enable_ar_bucket = true
min_ar = 0.5
max_ar = 2.0
num_ar_buckets = 7
frame_buckets = [1, 33]

[[directory]]
path = '/home/anon/data/images/grayscale'
num_repeats = 1
"""


def simpletuner(tmp_path, **backend):
    """A SimpleTuner file of one image backend on `photos` (``backend``: its keys changed) and a text-embeds backend,
    read."""
    from dit_lora.config.dataset_file import read_dataset_config

    image = {"id": "photos", "type": "local", "instance_data_dir": "photos", "caption_strategy": "textfile", **backend}
    return read_dataset_config(write(tmp_path, "multidatabackend.json", [image, SIMPLETUNER_WAN[1]]))


def concepts(tmp_path, *listed, name="concepts.json"):
    """A OneTrainer concepts file of ``listed``, read."""
    from dit_lora.config.dataset_file import read_dataset_config

    return read_dataset_config(write(tmp_path, name, list(listed)))


def ai_toolkit_job(tmp_path, datasets):
    """An ai-toolkit job YAML whose first process trains ``datasets``; its path."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"job": "extension", "config": {"name": "x", "process": [
        {"type": "sd_trainer", "datasets": datasets}]}}))
    return path


def musubi_clip_set(tmp_path, extra: str):
    """A musubi-tuner clip set (9 frames of 64 x 48, and ``extra`` TOML lines) read for a video family."""
    from dit_lora.config.dataset_file import read_dataset_config

    path = tmp_path / "clips.toml"
    path.write_text(f'[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\ntarget_frames = [9]\n{extra}')
    return read_dataset_config(path, video=True)
