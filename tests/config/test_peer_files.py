"""SimpleTuner's multidatabackend.json, OneTrainer's concepts.json and diffusion-pipe's dataset.toml read as dataset
configs, as their trainers read them (issue 76: they got "must be a mapping with a `datasets` list" or a list of
unknown keys). The files are their projects' own examples (their docs and example folders, at the commits the
modules name), local paths put in: each key maps, is named with its value, or is refused in one paragraph."""

from __future__ import annotations

import json

import pytest

from dit_lora.config.dataset_config import read_dataset_config
from dit_lora.core.errors import UserError

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


def _write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _simpletuner(tmp_path, **backend):
    image = {"id": "photos", "type": "local", "instance_data_dir": "photos", "caption_strategy": "textfile", **backend}
    return read_dataset_config(_write(tmp_path, "multidatabackend.json", [image, SIMPLETUNER_WAN[1]]))


def test_simpletuners_video_example_for_a_video_family(tmp_path):
    read = read_dataset_config(_write(tmp_path, "multidatabackend.json", SIMPLETUNER_WAN), video=True)
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
    (photos,) = _simpletuner(tmp_path, **backend).sets
    assert photos.options == {"train_data_dir": "photos", "caption_extension": ".txt", **options}
    assert photos.repeats == repeats


def test_simpletuners_repeats_and_pixel_sizes_are_said_as_read(tmp_path):
    note = _simpletuner(tmp_path, repeats=1, resolution=512, resolution_type="pixel", probability=0.5).note
    read_as, left_out = note.split("; left out: ")
    assert "`repeats: 1` as 2 passes: SimpleTuner counts those after the first" in read_as
    assert "`resolution_type: pixel` as buckets of about 512 x 512 pixels" in read_as
    assert "`probability: 0.5` (SimpleTuner weighs it by the set's size too" in left_out


def test_an_instance_prompt_backend_captions_every_file(tmp_path):
    (photos,) = _simpletuner(tmp_path, caption_strategy="instanceprompt", instance_prompt="a photo of sks").sets
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
        read_dataset_config(_write(tmp_path, "m.json", [image]))
    assert words in str(err.value) and "backend `photos`" in str(err.value) and "\n" not in str(err.value)


def test_a_mask_backend_is_refused_with_what_to_do_and_a_caption_filter_named(tmp_path):
    mask = {"id": "masks", "type": "local", "dataset_type": "conditioning", "conditioning_type": "mask",
            "instance_data_dir": "masks"}
    image = {"id": "photos", "type": "local", "instance_data_dir": "photos", "caption_strategy": "textfile",
             "conditioning_data": "masks"}
    with pytest.raises(UserError, match=r"mask backend .* `<image>_mask.png`, with --masked_loss"):
        read_dataset_config(_write(tmp_path, "m.json", [image, mask]))
    embeds = {**SIMPLETUNER_WAN[1], "caption_filter_list": ["a photo of"]}  # a change of the captions: named
    note = read_dataset_config(_write(tmp_path, "m.json", [image | {"conditioning_data": None}, embeds])).note
    assert "`caption_filter_list: ['a photo of']` (SimpleTuner rewrites every caption through it" in note


def test_disabled_backends_are_left_out_and_a_file_with_none_enabled_is_refused(tmp_path):
    off = {"id": "old", "type": "local", "instance_data_dir": "old", "caption_strategy": "textfile", "disabled": True}
    path = _write(tmp_path, "m.json", [off, {"id": "photos", "type": "local", "instance_data_dir": "photos",
                                             "caption_strategy": "textfile"}])
    read = read_dataset_config(path)
    assert [s.name for s in read.sets] == ["photos"] and "backend `old` (`disabled: true`" in read.note
    with pytest.raises(UserError, match="has no enabled `image` or `video` backend"):
        read_dataset_config(_write(tmp_path, "m.json", [off]))


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


def _concepts(tmp_path, *concepts, name="concepts.json"):
    return read_dataset_config(_write(tmp_path, name, list(concepts)))


def test_onetrainers_concept_at_its_defaults_reads_with_nothing_to_say(tmp_path):
    read = _concepts(tmp_path, ONETRAINER_CONCEPT)
    assert read.flavour == "OneTrainer"
    (concept,) = read.sets
    assert concept.name == "Training Images" and concept.repeats == 1 and concept.loss_weight == 1.0
    assert concept.options == {"train_data_dir": "training_data", "caption_extension": ".txt"}
    assert read.note is None  # every key at OneTrainer's default, which does nothing there either


def test_onetrainers_keys_at_other_values_map_or_are_named_with_their_values(tmp_path):
    concept = ONETRAINER_CONCEPT | {"balancing": 3.0, "loss_weight": 0.5, "image_variations": 4,
                                    "image": ONETRAINER_CONCEPT["image"] | {"enable_random_flip": True,
                                                                            "enable_random_rotate": True,
                                                                            "enable_resolution_override": True,
                                                                            "resolution_override": "768x512"}}
    read = _concepts(tmp_path, concept)
    (one,) = read.sets
    assert one.repeats == 3 and one.loss_weight == 0.5
    assert one.options["aspect_buckets"] == "768x512"
    for said in ("`image_variations: 4` (latents are cached once", "`image.enable_random_flip: True` (flips hold for "
                 "the whole run: --random_flip)", "`image.enable_random_rotate: True` (no counterpart"):
        assert said in read.note, said


def test_onetrainers_validation_concept_and_legacy_keys(tmp_path):
    """Version 0: `repeats` (OneTrainer's balancing), `validation_concept` (its type), migrated as OneTrainer does."""
    legacy = {"name": "DDPM", "path": "dataset/train", "seed": 402066767, "enabled": True, "repeats": 2.0,
              "loss_weight": 1.0, "text": {"prompt_source": "sample"}}
    validation = {"name": "held", "path": "dataset/val", "validation_concept": True}
    read = _concepts(tmp_path, legacy, validation)
    assert [(s.name, s.repeats) for s in read.sets] == [("DDPM", 2)]
    assert "concept `held` (`type: VALIDATION`" in read.note and "--validation_data_dir dataset/val" in read.note


@pytest.mark.parametrize("change, words", [
    ({"type": "PRIOR_PREDICTION"}, "towards the base model's own prediction"),
    ({"balancing": 0.0022}, "`balancing: 0.0022` trains 0.0022 times its images each epoch"),
    ({"balancing": 40, "balancing_strategy": "SAMPLES"}, "trains 40 of its images each epoch"),
    ({"text": {"prompt_source": "filename"}}, "captions each image with its file name"),
    ({"image": {"enable_resolution_override": True, "resolution_override": "512,768"}}, "one of several sizes"),
])
def test_onetrainer_concepts_that_would_train_otherwise_are_refused(tmp_path, change, words):
    with pytest.raises(UserError) as err:
        _concepts(tmp_path, ONETRAINER_CONCEPT | change)
    assert words in str(err.value) and "concept `Training Images`" in str(err.value)


def test_a_concepts_prompt_file_of_one_prompt_captions_every_image(tmp_path):
    prompt = tmp_path / "caption.txt"
    prompt.write_text("a photo of a man\n\n")
    text = {"prompt_source": "concept", "prompt_path": str(prompt)}
    (one,) = _concepts(tmp_path, ONETRAINER_CONCEPT | {"text": text}).sets
    assert one.options["instance_prompt"] == "a photo of a man"
    prompt.write_text("a man\nanother man\n")
    with pytest.raises(UserError, match="holds 2 prompt\\(s\\) \\(OneTrainer picks one line at random"):
        _concepts(tmp_path, ONETRAINER_CONCEPT | {"text": text})


def test_a_onetrainer_config_reads_its_inline_concepts_or_names_its_concept_file(tmp_path):
    config = {"__version": 11, "training_method": "LORA", "concept_file_name": "training_concepts/concepts.json",
              "concepts": [ONETRAINER_CONCEPT]}
    read = read_dataset_config(_write(tmp_path, "config.json", config))
    assert [s.name for s in read.sets] == ["Training Images"]
    with pytest.raises(UserError, match="concepts are in another file .*training_concepts/concepts.json.*Pass that file"):
        read_dataset_config(_write(tmp_path, "config.json", config | {"concepts": None}))


def test_subfolders_onetrainer_does_not_read_are_named(tmp_path):
    data = tmp_path / "training_data"
    (data / "extra").mkdir(parents=True)
    read = _concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(data)})
    assert "OneTrainer reads only the folder's own images; dit-lora reads its subfolders too" in read.note


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


def test_diffusion_pipes_example_for_an_image_family(tmp_path):
    read = read_dataset_config(_write(tmp_path, "dataset.toml", DIFFUSION_PIPE_TOML))
    assert read.flavour == "diffusion-pipe"
    (images,) = read.sets
    assert images.options == {"train_data_dir": "/home/anon/data/images/grayscale", "resolution": 512}
    for said in ("`min_ar = 0.5` (buckets step", "`num_ar_buckets = 7`", "`frame_buckets = [1, 33]` (an image family"):
        assert said in read.note, said


def test_diffusion_pipes_frame_buckets_for_a_video_family(tmp_path):
    read = read_dataset_config(_write(tmp_path, "dataset.toml", DIFFUSION_PIPE_TOML), video=True)
    (clips,) = read.sets
    # bucket 1 is diffusion-pipe's images: dit-lora gives images one-frame buckets of their own, and a clip too short
    # for 33 frames is left out, as diffusion-pipe drops it (never trained as a still)
    assert clips.options["frame_buckets"] == "33x512x512" and clips.options["frame_sampling"] == "first"
    assert "frame_sampling" in clips.derived.implied  # --frame_sampling on the command line takes its place
    assert "`frame_buckets` of clips at their own frame rate" in read.note


def test_diffusion_pipes_directory_overrides_squares_and_several_resolutions(tmp_path):
    text = """
resolutions = [768]
num_repeats = 8
[[directory]]
path = '/data/videos'
resolutions = [512, [1280, 720]]
[[directory]]
path = '/data/images'
enable_ar_bucket = true
"""
    read = read_dataset_config(_write(tmp_path, "dataset.toml", text))
    videos_512, videos_960, images = read.sets
    assert (videos_512.name, videos_512.options["resolution"], videos_512.options["aspect_buckets"]) == (
        "videos@512", 512, "square")  # enable_ar_bucket off, diffusion-pipe's default: squares
    assert videos_960.options["resolution"] == 960  # [1280, 720]'s area as a square's side
    assert images.options == {"train_data_dir": "/data/images", "resolution": 768} and images.repeats == 8


@pytest.mark.parametrize("text, words", [
    ("mask_path = '/m'", "reads each image's mask from a folder of its own"),
    ("control_path = '/c'", "control images train only the edit families"),
    ("num_repeats = 0.5", "trains that share of its samples per epoch"),
])
def test_diffusion_pipe_directories_that_would_train_otherwise_are_refused(tmp_path, text, words):
    with pytest.raises(UserError, match=words):
        read_dataset_config(_write(tmp_path, "dataset.toml", f"resolutions = [512]\n[[directory]]\npath = '/d'\n{text}\n"))


def test_a_folder_whose_captions_are_in_captions_json_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "captions.json").write_text("{}")
    with pytest.raises(UserError, match="holds captions.json, from which diffusion-pipe takes every caption"):
        read_dataset_config(_write(tmp_path, "dataset.toml", f"resolutions = [512]\n[[directory]]\npath = '{tmp_path / 'd'}'\n"))


def test_cosmos_size_buckets(tmp_path):
    text = "size_buckets = [[960, 960, 1], [960, 704, 1]]\n[[directory]]\npath = '/d'\n"
    with pytest.raises(UserError, match="`size_buckets` of 2 image sizes"):
        read_dataset_config(_write(tmp_path, "dataset.toml", text))
    (one,) = read_dataset_config(_write(tmp_path, "d.toml", text.replace(", [960, 704, 1]", ""))).sets
    assert one.options["aspect_buckets"] == "960x960"
    (clips,) = read_dataset_config(_write(tmp_path, "d.toml", text.replace("704, 1]", "704, 33]")), video=True).sets
    assert clips.options["frame_buckets"] == "33x704x960"


def test_dit_loras_own_keys_pass_through_a_peers_entry(tmp_path):
    """A `weight` added to each backend, as the docs say for fixed shares, is read as dit-lora's."""
    path = _write(tmp_path, "m.json", [{"id": "a", "type": "local", "instance_data_dir": "a",
                                        "caption_strategy": "textfile", "weight": 3},
                                       {"id": "b", "type": "local", "instance_data_dir": "b",
                                        "caption_strategy": "textfile", "weight": 1}])
    assert [s.weight for s in read_dataset_config(path).sets] == [3.0, 1.0]


@pytest.mark.parametrize("name, content, peer", [
    ("concepts.json", [ONETRAINER_CONCEPT], "OneTrainer's"),
    ("config.json", {"training_method": "LORA", "concepts": [ONETRAINER_CONCEPT]}, "OneTrainer's"),
    ("multidatabackend.json", SIMPLETUNER_WAN, "SimpleTuner's"),
    ("dataset.toml", DIFFUSION_PIPE_TOML, "diffusion-pipe's"),
])
def test_a_peers_dataset_file_given_as_the_run_config_names_dataset_config(tmp_path, name, content, peer):
    from dit_lora.config import parse_config

    path = _write(tmp_path, name, content)
    with pytest.raises(UserError) as err:
        parse_config(["--config", path])
    assert f"is {peer} dataset" in str(err.value) and f"pass it as --dataset_config {path}" in str(err.value)


def test_a_simpletuner_hub_backend_reads_its_dataset_with_simpletuners_defaults(tmp_path):
    hub = {"id": "domo", "type": "huggingface", "dataset_name": "RareConcepts/Domokun", "resolution": 1024,
           "resolution_type": "pixel_area", "metadata_backend": "huggingface", "caption_strategy": "huggingface"}
    (domo,) = read_dataset_config(_write(tmp_path, "m.json", [hub])).sets
    assert domo.options == {"dataset_name": "RareConcepts/Domokun", "dataset_split": "train", "image_column": "image",
                            "caption_column": "caption", "resolution": 1024}
    block = {"id": "b", "type": "huggingface", "huggingface": {"dataset_name": "me/set", "split": "val",
                                                                "caption_column": "text", "image_column": "jpg"}}
    (b,) = read_dataset_config(_write(tmp_path, "m.json", [block])).sets  # no caption_strategy: SimpleTuner's hub one
    assert (b.options["dataset_name"], b.options["dataset_split"], b.options["caption_column"],
            b.options["image_column"]) == ("me/set", "val", "text", "jpg")


def test_multi_line_caption_files_are_said_read_whole(tmp_path):
    """SimpleTuner (unless `disable_multiline_split`) and OneTrainer take each line as a caption of its own."""
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.txt").write_text("a red square\na square in red\n")
    (folder / "b.txt").write_text("one line\n")
    note = _simpletuner(tmp_path, instance_data_dir=str(folder)).note
    assert "1 caption file(s) of several lines (a.txt) read whole, each one caption: SimpleTuner takes each" in note
    note = _simpletuner(tmp_path, instance_data_dir=str(folder), disable_multiline_split=True).note
    assert "several lines" not in note and "disable_multiline_split" not in note  # what dit-lora does, said nothing
    note = _concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(folder)}).note
    assert "OneTrainer takes each line as a caption of its own" in note


def test_onetrainers_mask_and_condition_files_are_not_trained_as_images(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"")
    (folder / "a-masklabel.png").write_bytes(b"")
    with pytest.raises(UserError, match=r"`a-masklabel.png` is OneTrainer's mask .* `a_mask.png`"):
        _concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(folder)})
    (folder / "a-masklabel.png").rename(folder / "a-condlabel.png")
    with pytest.raises(UserError, match="conditioning image of an image"):
        _concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(folder)})


def test_onetrainers_subdirectories_read_as_dit_lora_reads_them_are_not_named(tmp_path):
    (tmp_path / "training_data" / "sub").mkdir(parents=True)
    read = _concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(tmp_path / "training_data"),
                                                     "include_subdirectories": True})
    assert read.note is None


def test_two_entries_of_one_name_are_numbered_and_one_area_given_twice_is_one_set(tmp_path):
    read = _concepts(tmp_path, ONETRAINER_CONCEPT, ONETRAINER_CONCEPT | {"path": "more"})
    assert [s.name for s in read.sets] == ["Training Images", "Training Images-2"]
    text = "resolutions = [512, [512, 512]]\n[[directory]]\npath = '/d'\n"
    assert [s.options["resolution"] for s in read_dataset_config(_write(tmp_path, "d.toml", text)).sets] == [512]


def test_a_simpletuner_clip_backend_without_resolution_takes_the_runs_size(tmp_path):
    clips = SIMPLETUNER_WAN[0] | {}
    clips.pop("resolution")
    (one,) = read_dataset_config(_write(tmp_path, "m.json", [clips]), video=True).sets
    assert "height" not in one.options and one.derived.fit == {}
