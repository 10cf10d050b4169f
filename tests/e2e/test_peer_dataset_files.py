"""The three peers' dataset files of issue 76 train: SimpleTuner's multidatabackend.json and OneTrainer's
concepts.json on Sana, diffusion-pipe's dataset.toml on Sana and on Wan (its frame buckets, images beside clips),
SimpleTuner's video backend on Wan; each file as its trainer's docs write it, the run's log naming what it left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import train_in_process

SANA = dict(train_data_dir=None, max_train_steps=2, train_batch_size=2, lr_scheduler="constant", lr_warmup_steps=0,
            resolution=None)
WAN = dict(family="wan", train_data_dir=None, resolution=None, center_crop=None, max_num_frames=None, height=None,
           width=None, train_batch_size=1, mixed_precision="no", max_train_steps=2, lr_scheduler="constant",
           lr_warmup_steps=0)


def _captioned(root: Path, source: Path) -> Path:
    """``source``'s files with their metadata.jsonl captions written as .txt files beside them (what SimpleTuner's
    textfile, OneTrainer's sample and diffusion-pipe read)."""
    root.mkdir(parents=True)
    for line in (source / "metadata.jsonl").read_text().splitlines():
        row = json.loads(line)
        (root / row["file_name"]).write_bytes((source / row["file_name"]).read_bytes())
        (root / row["file_name"]).with_suffix(".txt").write_text(row["text"])
    return root


@pytest.fixture(scope="module")
def captioned_shapes(tmp_path_factory):
    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    root = tmp_path_factory.mktemp("peer-files")
    return _captioned(root / "shapes", make_shapes_dataset(root / "source", n=4, size=64, seed=4))


def _files(folder: Path, out: Path) -> dict[str, Path]:
    """Each peer's file naming ``folder``, 64 px, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "multidatabackend.json": [
            {"id": "shapes", "type": "local", "instance_data_dir": str(folder), "caption_strategy": "textfile",
             "resolution": 64, "resolution_type": "pixel_area", "crop": False, "repeats": 1,
             "cache_dir_vae": "cache/vae/sana/shapes", "metadata_backend": "discovery"},
            {"id": "text-embeds", "type": "local", "dataset_type": "text_embeds", "default": True,
             "cache_dir": "cache/text/sana", "write_batch_size": 128},
        ],
        "concepts.json": [
            {"__version": 2, "image": {"__version": 0, "enable_crop_jitter": True, "enable_random_flip": False,
                                       "enable_resolution_override": True, "resolution_override": "64"},
             "text": {"__version": 0, "prompt_source": "sample", "prompt_path": "", "enable_tag_shuffling": False,
                      "tag_delimiter": ",", "keep_tags_count": 1},
             "name": "shapes", "path": str(folder), "seed": 11, "enabled": True, "type": "STANDARD",
             "include_subdirectories": False, "image_variations": 1, "text_variations": 1, "balancing": 2.0,
             "balancing_strategy": "REPEATS", "loss_weight": 1.0, "concept_stats": {}},
        ],
        "dataset.toml": (f"resolutions = [64]\nenable_ar_bucket = true\nmin_ar = 0.5\nmax_ar = 2.0\nnum_ar_buckets = 7\n"
                         f"frame_buckets = [1, 5]\n\n[[directory]]\npath = '{folder}'\nnum_repeats = 1\n"),
    }
    paths = {}
    for name, content in files.items():
        paths[name] = out / name
        paths[name].write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("name, repeats, said", [
    ("multidatabackend.json", 2, "backend `text-embeds` (`dataset_type: text_embeds`"),
    ("concepts.json", 2, None),
    ("dataset.toml", 1, "`frame_buckets = [1, 5]` (an image family reads no clips)"),
])
def test_each_peers_file_trains_sana(tiny_sana, captioned_shapes, tmp_path, capsys, name, repeats, said):
    config = _files(captioned_shapes, tmp_path / "files")[name]
    summary, out = train_in_process(tiny_sana, captioned_shapes, tmp_path, dataset_config=config, **SANA)
    log = capsys.readouterr().out
    assert isinstance(summary, dict) and summary["status"] == "completed", (summary, log[-3000:])
    (shapes,) = summary["data_sets"]
    assert shapes["samples"] == 4 * repeats
    assert (said in log) if said else f"dataset config `{config}`" not in log  # defaults only: nothing to say


@pytest.fixture(scope="module")
def tiny_wan_and_clips(tmp_path_factory):
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    root = tmp_path_factory.mktemp("peer-clips")
    clips = _captioned(root / "clips", make_moving_square_dataset(root / "source", n=3, num_frames=9, fps=16, seed=5))
    return build_tiny_wan_pipeline(root / "wan", variant="2.1-t2v"), clips


@pytest.mark.slow
def test_diffusion_pipes_frame_buckets_and_simpletuners_video_backend_train_wan(tiny_wan_and_clips, tmp_path, capsys):
    model, clips = tiny_wan_and_clips
    (clips / "still.png").write_bytes(_png())  # a still beside the clips, as diffusion-pipe examples mix them
    (clips / "still.txt").write_text("a still frame")
    dataset_toml = _files(clips, tmp_path / "files")["dataset.toml"]
    summary, _ = train_in_process(model, clips, tmp_path / "dp", dataset_config=dataset_toml, **WAN)
    log = capsys.readouterr().out
    assert isinstance(summary, dict) and summary["status"] == "completed", (summary, log[-3000:])
    assert "buckets (frames x height x width): 5x64x64, 1x64x64" in log  # the still in a one-frame bucket of its own
    assert summary["data_sets"][0]["samples"] == 4 and summary["quarantine"] == []
    backends = [{"id": "clips", "type": "local", "dataset_type": "video", "instance_data_dir": str(clips),
                 "caption_strategy": "textfile", "resolution": 64, "video": {"num_frames": 9, "min_frames": 9}}]
    (tmp_path / "st.json").write_text(json.dumps(backends))
    summary, _ = train_in_process(model, clips, tmp_path / "st", dataset_config=tmp_path / "st.json", **WAN)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert summary["data_sets"][0]["samples"] == 4  # the three clips and the still, at 9 frames and one


def _png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()
