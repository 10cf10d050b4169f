"""config/peer_onetrainer.py: OneTrainer's concepts.json (or its config's `concepts`) read as OneTrainer reads it
(issue 76): each key maps, is named with its value when not OneTrainer's default, or is refused in one paragraph."""

from __future__ import annotations

import pytest

from dit_lora.config.dataset_file import read_dataset_config
from dit_lora.core.errors import UserError
from peer_files_data import ONETRAINER_CONCEPT, concepts, write




def test_onetrainers_concept_at_its_defaults_reads_with_nothing_to_say(tmp_path):
    read = concepts(tmp_path, ONETRAINER_CONCEPT)
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
    read = concepts(tmp_path, concept)
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
    read = concepts(tmp_path, legacy, validation)
    assert [(s.name, s.repeats) for s in read.sets] == [("DDPM", 2)]
    assert "concept `held` (`type: VALIDATION`" in read.note and "--validation_data_dir dataset/val" in read.note


@pytest.mark.parametrize("change, words", [
    ({"type": "PRIOR_PREDICTION"}, "towards the base model's own prediction"),
    ({"balancing": 0.0022}, "`balancing: 0.0022`, which trains 0.0022 times its images each epoch"),
    ({"balancing": 40, "balancing_strategy": "SAMPLES"}, "trains 40 of its images each epoch"),
    ({"text": {"prompt_source": "filename"}}, "captions each image with its file name"),
    ({"image": {"enable_resolution_override": True, "resolution_override": "512,768"}}, "one of several sizes"),
])
def test_onetrainer_concepts_that_would_train_otherwise_are_refused(tmp_path, change, words):
    with pytest.raises(UserError) as err:
        concepts(tmp_path, ONETRAINER_CONCEPT | change)
    assert words in str(err.value) and "concept `Training Images`" in str(err.value)


def test_a_concepts_prompt_file_of_one_prompt_captions_every_image(tmp_path):
    prompt = tmp_path / "caption.txt"
    prompt.write_text("a photo of a man\n\n")
    text = {"prompt_source": "concept", "prompt_path": str(prompt)}
    (one,) = concepts(tmp_path, ONETRAINER_CONCEPT | {"text": text}).sets
    assert one.options["instance_prompt"] == "a photo of a man"
    prompt.write_text("a man\nanother man\n")
    with pytest.raises(UserError, match="holds 2 prompt\\(s\\) \\(OneTrainer picks one line at random"):
        concepts(tmp_path, ONETRAINER_CONCEPT | {"text": text})


def test_a_onetrainer_config_reads_its_inline_concepts_or_names_its_concept_file(tmp_path):
    config = {"__version": 11, "training_method": "LORA", "concept_file_name": "training_concepts/concepts.json",
              "concepts": [ONETRAINER_CONCEPT]}
    read = read_dataset_config(write(tmp_path, "config.json", config))
    assert [s.name for s in read.sets] == ["Training Images"]
    with pytest.raises(UserError, match="concepts are in another file .*training_concepts/concepts.json.*Pass that file"):
        read_dataset_config(write(tmp_path, "config.json", config | {"concepts": None}))


def test_subfolders_onetrainer_does_not_read_are_named(tmp_path):
    data = tmp_path / "training_data"
    (data / "extra").mkdir(parents=True)
    read = concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(data)})
    assert "OneTrainer reads only the folder's own images; dit-lora reads its subfolders too" in read.note


def test_onetrainers_mask_and_condition_files_are_not_trained_as_images(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"")
    (folder / "a-masklabel.png").write_bytes(b"")
    with pytest.raises(UserError, match=r"`a-masklabel.png` is OneTrainer's mask .* `a_mask.png`"):
        concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(folder)})
    (folder / "a-masklabel.png").rename(folder / "a-condlabel.png")
    with pytest.raises(UserError, match="conditioning image of an image"):
        concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(folder)})


def test_onetrainers_subdirectories_read_as_dit_lora_reads_them_are_not_named(tmp_path):
    (tmp_path / "training_data" / "sub").mkdir(parents=True)
    read = concepts(tmp_path, ONETRAINER_CONCEPT | {"path": str(tmp_path / "training_data"),
                                                     "include_subdirectories": True})
    assert read.note is None


def test_the_refusals_fix_for_a_share_of_batches_is_accepted(tmp_path):
    """What the fractional-balancing paragraph advises (`balancing: 1` and a `weight` in every concept) reads."""
    with pytest.raises(UserError, match="give every concept `balancing: 1` and a `weight`"):
        concepts(tmp_path, ONETRAINER_CONCEPT | {"balancing": 0.5})
    read = concepts(tmp_path, ONETRAINER_CONCEPT | {"balancing": 1, "weight": 3},
                    ONETRAINER_CONCEPT | {"name": "reg", "path": "reg", "weight": 1})
    assert [(s.name, s.repeats, s.weight) for s in read.sets] == [("Training Images", 1, 3.0), ("reg", 1, 1.0)]
