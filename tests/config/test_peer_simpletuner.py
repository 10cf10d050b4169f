"""config/peer_simpletuner.py: SimpleTuner's multidatabackend.json read as SimpleTuner reads it (issue 76): each key
maps, is named with its value, or is refused in one paragraph."""

from __future__ import annotations

import pytest

from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.core.errors import UserError
from peer_files_data import SIMPLETUNER_WAN, simpletuner, write




def test_simpletuners_video_example_for_a_video_family(tmp_path):
    read = read_dataset_config(write(tmp_path, "multidatabackend.json", SIMPLETUNER_WAN), video=True)
    assert read.flavour == "SimpleTuner"
    (clips,) = read.sets
    assert clips.name == "disney-black-and-white" and clips.repeats == 1
    assert clips.options == {"train_data_dir": "datasets/disney-black-and-white", "caption_extension": ".txt",
                             "height": 480, "width": 480, "max_num_frames": 75, "frame_sampling": "first"}
    assert clips.derived.fit == {"side": 480} and "frame_sampling" in clips.derived.implied
    note = read.note
    for said in ("backend `text-embeds` (`dataset_type: text_embeds`", "`cache_dir_vae: cache/vae/wan/",
                 "`minimum_image_size: 480` (no image is left out", "`video.bucket_strategy: aspect_ratio`"):
        assert said in note, said
    assert "min_frames" not in note  # at num_frames: what dit-lora does too


@pytest.mark.parametrize("backend, options, repeats", [
    ({"resolution": 1024, "repeats": 2}, {"resolution": 1024}, 3),  # 2 passes after the first
    ({"resolution": 1.0, "resolution_type": "area"}, {"resolution": 1024}, 1),  # megapixels, SimpleTuner's 64 step
    ({"resolution": 768, "crop": True, "crop_aspect": "square"}, {"resolution": 768, "aspect_buckets": "square"}, 1),
    ({}, {}, 1),  # no resolution: SimpleTuner's --resolution, a run option: the run's own size here
    ({"max_num_samples": 10}, {"max_train_samples": 10}, 1),
])
def test_simpletuners_image_backend_sizes_repeats_and_caps(tmp_path, backend, options, repeats):
    (photos,) = simpletuner(tmp_path, **backend).sets
    assert photos.options == {"train_data_dir": "photos", "caption_extension": ".txt", **options}
    assert photos.repeats == repeats


def test_simpletuners_repeats_and_pixel_sizes_are_said_as_read(tmp_path):
    note = simpletuner(tmp_path, repeats=1, resolution=512, resolution_type="pixel", probability=0.5).note
    read_as, left_out = note.split("; left out: ")
    assert "`repeats: 1` as 2 passes: SimpleTuner counts those after the first" in read_as
    assert "`resolution_type: pixel` as buckets of about 512 x 512 pixels" in read_as
    assert "`probability: 0.5` (SimpleTuner weighs it by the set's size too" in left_out


def test_an_instance_prompt_backend_captions_every_file(tmp_path):
    (photos,) = simpletuner(tmp_path, caption_strategy="instanceprompt", instance_prompt="a photo of sks").sets
    assert photos.options["instance_prompt"] == "a photo of sks" and "caption_extension" not in photos.options


@pytest.mark.parametrize("backend, words", [
    ({"caption_strategy": "<absent>"}, "SimpleTuner's default when a backend gives none"),  # filename captions
    ({"caption_strategy": "filename"}, "captions each file with its name"),
    ({"caption_strategy": "parquet"}, "`caption_strategy: parquet`"),
    ({"caption_strategy": "instanceprompt", "instance_prompt": ["a", "b"]}, "a list (SimpleTuner draws one per step)"),
    ({"is_regularisation_data": True}, "towards the base model's own prediction"),
    ({"probability": 0}, "SimpleTuner never samples it"),
    ({"type": "aws"}, "a `type: aws` backend"),
    ({"instance_data_dir": "{env:DATA}/photos"}, "SimpleTuner placeholder"),
])
def test_what_would_train_otherwise_is_refused_in_one_paragraph(tmp_path, backend, words):
    image = {"id": "photos", "type": "local", "instance_data_dir": "photos", "caption_strategy": "textfile", **backend}
    image = {k: v for k, v in image.items() if v != "<absent>"}
    with pytest.raises(UserError) as err:
        read_dataset_config(write(tmp_path, "m.json", [image]))
    assert words in str(err.value) and "backend `photos`" in str(err.value) and "\n" not in str(err.value)


def test_a_mask_backend_is_refused_with_what_to_do_and_a_caption_filter_named(tmp_path):
    mask = {"id": "masks", "type": "local", "dataset_type": "conditioning", "conditioning_type": "mask",
            "instance_data_dir": "masks"}
    image = {"id": "photos", "type": "local", "instance_data_dir": "photos", "caption_strategy": "textfile",
             "conditioning_data": "masks"}
    with pytest.raises(UserError, match=r"mask backend .* `<image>_mask.png`, with --masked_loss"):
        read_dataset_config(write(tmp_path, "m.json", [image, mask]))
    embeds = {**SIMPLETUNER_WAN[1], "caption_filter_list": ["a photo of"]}  # a change of the captions: named
    note = read_dataset_config(write(tmp_path, "m.json", [image | {"conditioning_data": None}, embeds])).note
    assert "`caption_filter_list: ['a photo of']` (SimpleTuner rewrites every caption through it" in note


def test_disabled_backends_are_left_out_and_a_file_with_none_enabled_is_refused(tmp_path):
    off = {"id": "old", "type": "local", "instance_data_dir": "old", "caption_strategy": "textfile", "disabled": True}
    path = write(tmp_path, "m.json", [off, {"id": "photos", "type": "local", "instance_data_dir": "photos",
                                             "caption_strategy": "textfile"}])
    read = read_dataset_config(path)
    assert [s.name for s in read.sets] == ["photos"] and "backend `old` (`disabled: true`" in read.note
    with pytest.raises(UserError, match="has no enabled `image` or `video` backend"):
        read_dataset_config(write(tmp_path, "m.json", [off]))


def test_a_simpletuner_hub_backend_reads_its_dataset_with_simpletuners_defaults(tmp_path):
    hub = {"id": "domo", "type": "huggingface", "dataset_name": "RareConcepts/Domokun", "resolution": 1024,
           "resolution_type": "pixel_area", "metadata_backend": "huggingface", "caption_strategy": "huggingface"}
    (domo,) = read_dataset_config(write(tmp_path, "m.json", [hub])).sets
    assert domo.options == {"dataset_name": "RareConcepts/Domokun", "dataset_split": "train", "image_column": "image",
                            "caption_column": "caption", "resolution": 1024}
    block = {"id": "b", "type": "huggingface", "huggingface": {"dataset_name": "me/set", "split": "val",
                                                                "caption_column": "text", "image_column": "jpg"}}
    (b,) = read_dataset_config(write(tmp_path, "m.json", [block])).sets  # no caption_strategy: SimpleTuner's hub one
    assert (b.options["dataset_name"], b.options["dataset_split"], b.options["caption_column"],
            b.options["image_column"]) == ("me/set", "val", "text", "jpg")


def test_a_simpletuner_clip_backend_without_resolution_takes_the_runs_size(tmp_path):
    clips = SIMPLETUNER_WAN[0] | {}
    clips.pop("resolution")
    (one,) = read_dataset_config(write(tmp_path, "m.json", [clips]), video=True).sets
    assert "height" not in one.options and one.derived.fit == {}
