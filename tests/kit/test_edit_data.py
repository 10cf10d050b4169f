"""kit/edit_data.py (Qwen-Image-Edit's and FLUX.1 Kontext's): control images from the metadata columns of the trainers people come from, the
control files left out of the samples, a changed control image a new cache entry, bad controls one paragraph."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.kit.edit_data import ControlSetup, EditMedia, metadata_controls
from dit_lora.registry import get_spec


def _folder(tmp_path, rows, controls=("c1.png", "c2.png")):
    for name in (*(r["file_name"] for r in rows), *controls):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (32, 32), (len(name) * 20, 0, 0)).save(tmp_path / name)
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _media(tmp_path, family="qwenimage_edit_plus", **options):
    cfg = TrainConfig.for_family(family, train_data_dir=str(tmp_path), resolution=32, **options)
    spec = get_spec(family)
    return spec.data.data_handler(cfg, spec)


@pytest.mark.parametrize("row", [
    {"control_image": "c1.png"},
    {"control_images": ["c1.png", "c2.png"]},
    {"edit_image": ["c1.png", "c2.png"]},  # DiffSynth-Studio
    {"control_path_0": "c1.png", "control_path_1": "c2.png"},  # musubi-tuner's JSONL
])
def test_every_layout_names_the_controls_and_they_are_no_samples(tmp_path, row):
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "make it red", **row},
                                {"file_name": "b.png", "text": "make it blue", **row}],
                     controls=_named(row))
    samples = _media(folder).list_samples()
    assert [s.key for s in samples] == ["a.png", "b.png"]  # the control files are controls, not samples
    assert samples[0].conditions == tuple(str(folder / name) for name in _named(row))


def _named(row: dict) -> tuple[str, ...]:
    """The control file names a row gives, in its order."""
    return tuple(n for v in row.values() for n in ([v] if isinstance(v, str) else v))


def test_a_named_column_and_a_csv_json_list(tmp_path):
    _folder(tmp_path, [{"file_name": "a.png", "text": "x"}])
    (tmp_path / "metadata.jsonl").unlink()
    (tmp_path / "metadata.csv").write_text('file_name,text,source\na.png,x,"[""c1.png"", ""c2.png""]"\n')
    found = metadata_controls(str(tmp_path), "source")
    assert found[("a.png", "x")].paths == (str(tmp_path / "c1.png"), str(tmp_path / "c2.png"))


def test_a_sample_without_control_is_one_paragraph(tmp_path):
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "x", "control_image": "c1.png"},
                                {"file_name": "b.png", "text": "y"}], controls=("c1.png",))
    with pytest.raises(UserError, match=r"1 sample\(s\).*b\.png.*control_image"):
        _media(folder).list_samples()


def test_a_missing_or_unreadable_control_names_the_sample_and_column(tmp_path):
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "x", "control_image": "gone.png"}], controls=())
    media = _media(folder, qwen_control_column="control_image")
    samples = media.list_samples()
    with pytest.raises(UserError, match=r"`.*gone\.png` of sample `a\.png` \(metadata column `control_image`\) does "
                                        r"not exist"):
        media.screen(samples, log=lambda m: None, quarantine=[])
    (folder / "gone.png").write_bytes(b"not a png")
    with pytest.raises(UserError, match="cannot be read as an image"):
        media.screen(samples, log=lambda m: None, quarantine=[])


def test_edit_takes_one_control_and_groups_split_by_count(tmp_path):
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "x", "control_images": ["c1.png", "c2.png"]},
                                {"file_name": "b.png", "text": "y", "control_image": "c1.png"}])
    single = _media(folder, family="qwenimage_edit")
    with pytest.raises(UserError, match="takes exactly one"):
        single.screen(single.list_samples(), log=lambda m: None, quarantine=[])
    plus = _media(folder)
    screened = plus.screen(plus.list_samples(), log=lambda m: None, quarantine=[])
    assert plus.groups(screened) == [1, 0] or plus.groups(screened) == [0, 1]


def test_a_changed_control_image_changes_the_cache_key(tmp_path):
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "x", "control_image": "c1.png"}], controls=("c1.png",))
    sample = _media(folder).list_samples()[0]
    before = sample.cache_key()
    Image.new("RGB", (32, 32), (0, 255, 0)).save(folder / "c1.png")
    assert sample.cache_key() != before and SimpleNamespace(key=sample.key).key == "a.png"


def test_a_control_folder_as_musubi_tuner_and_ai_toolkit_lay_it_out(tmp_path):
    """``--qwen_control_dir``: ``<stem>.<ext>`` for one control, ``<stem>_<N>.<ext>`` for several (in N's order); a
    folder inside the data folder holds no samples."""
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "x"}, {"file_name": "b.png", "text": "y"}],
                     controls=("controls/a.jpg", "controls/b_1.png", "controls/b_0.png", "controls/b_10.png"))
    samples = _media(folder, qwen_control_dir=str(folder / "controls")).list_samples()
    assert [s.key for s in samples] == ["a.png", "b.png"]
    assert samples[0].conditions == (str(folder / "controls" / "a.jpg"),)
    assert [p.rsplit("/", 1)[-1] for p in samples[1].conditions] == ["b_0.png", "b_1.png", "b_10.png"]


def test_the_control_images_crop_is_said():
    """Control images are resized to cover their sample's bucket and centre-cropped: the log says so, and how many
    lose more than 10% of their area."""
    from types import SimpleNamespace

    from PIL import Image

    from dit_lora.kit.edit_data import control_crop_line, kept_area

    assert kept_area((64, 64), (64, 64)) == 1.0 and kept_area((128, 64), (64, 64)) == 0.5
    assert kept_area((60, 64), (64, 64)) == 60 / 64
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    Image.new("RGB", (64, 64)).save(folder / "square.png")
    Image.new("RGB", (128, 64)).save(folder / "wide.png")
    samples = [SimpleNamespace(conditions=(str(folder / "square.png"), str(folder / "wide.png")), bucket=(64, 64))]
    line = control_crop_line(samples)
    assert line.startswith("control images: 2 for 1 samples") and "1 lose more than 10%" in line


def test_each_family_names_its_own_flags(tmp_path):
    """Kontext's messages and folder option are its own (diffusers' --cond_image_column, --cond_image_dir), one
    control a sample."""
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "x"}, {"file_name": "b.png", "text": "y"}],
                     controls=("controls/a.png",))
    with pytest.raises(UserError, match=r"nor in --cond_image_dir: b\.png.*--cond_image_column"):
        _media(folder, family="flux_kontext", cond_image_dir=str(folder / "controls")).list_samples()
    folder = _folder(tmp_path / "two", [{"file_name": "a.png", "text": "x", "edit": ["c1.png", "c2.png"]}])
    media = _media(folder, family="flux_kontext", cond_image_column="edit")
    with pytest.raises(UserError, match=r"2 control images in `edit`; FLUX.1 Kontext \(FluxKontextPipeline\) takes "
                                        r"exactly one\. Give it one\."):
        media.screen(media.list_samples(), log=lambda m: None, quarantine=[])


def test_the_options_an_edit_model_cannot_take_are_one_paragraph_each():
    from dit_lora.kit.edit_data import refuse_edit_options

    for flag, value in (("random_flip", True), ("cache_latents", False)):
        with pytest.raises(UserError, match=f"--{flag}.* not supported for Model X"):
            refuse_edit_options(TrainConfig.for_family("flux_kontext", **{flag: value}), "Model X")
    dropping = TrainConfig.for_family("flux_kontext", caption_dropout_probability=0.1)
    refuse_edit_options(dropping, "Model X")  # a caption encoded without the image drops as any caption does
    with pytest.raises(UserError, match="--caption_dropout_probability is not supported for Model X: the reason"):
        refuse_edit_options(dropping, "Model X", dropout="the reason")


def test_a_control_is_prepared_as_its_target_and_a_validation_control_fits_the_square(tmp_path):
    """The control of a sample gets its target's crop window (the same seed and key), never a flip; the validation
    control is the centre crop of the run's square, and an unreadable one is one paragraph."""
    import torch

    from dit_lora.data.transforms import crop_seed, preprocess_image
    from dit_lora.kit.edit_data import control_pixels, fitted_control, to_pil

    image = Image.effect_noise((96, 64), 40).convert("RGB")
    image.save(tmp_path / "c.png")
    sample = SimpleNamespace(key="a.png", bucket=(48, 48))
    want = preprocess_image(image, (48, 48), center_crop=False, flip=False, crop_rng_seed=crop_seed(3, "a.png"))
    assert torch.equal(control_pixels(sample, str(tmp_path / "c.png"), (False, 3)), want)
    fitted = fitted_control(str(tmp_path / "c.png"), 32)
    assert fitted.shape == (3, 32, 32) and to_pil(fitted).size == (32, 32)
    assert torch.equal(fitted, preprocess_image(image, (32, 32), center_crop=True, flip=False, crop_rng_seed=0))
    (tmp_path / "bad.png").write_bytes(b"no")
    with pytest.raises(UserError, match="validation control image .*bad.png. cannot be read"):
        fitted_control(str(tmp_path / "bad.png"), 32)


def test_a_control_is_decoded_as_a_target_is(tmp_path):
    """EXIF orientation (a portrait photo stored landscape) and transparency (on white) as the targets' decoder gives
    them, and the crop line reads the oriented size."""
    import torch

    from dit_lora.data.decode import load_rgb
    from dit_lora.data.transforms import preprocess_image
    from dit_lora.kit.edit_data import control_crop_line, control_pixels

    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    Image.effect_noise((64, 32), 40).convert("RGB").save(tmp_path / "c.jpg", exif=exif)
    assert load_rgb(str(tmp_path / "c.jpg")).size == (32, 64)
    sample = SimpleNamespace(key="a.png", bucket=(64, 32), conditions=(str(tmp_path / "c.jpg"),))
    want = preprocess_image(load_rgb(str(tmp_path / "c.jpg")), (64, 32), center_crop=True, flip=False, crop_rng_seed=0)
    assert torch.equal(control_pixels(sample, str(tmp_path / "c.jpg"), (True, 0)), want)
    assert "0 lose more than 10%" in control_crop_line([sample])  # portrait on a portrait bucket: whole
    Image.new("RGBA", (32, 32), (0, 0, 0, 0)).save(tmp_path / "clear.png")
    clear = control_pixels(SimpleNamespace(key="b.png", bucket=(32, 32)), str(tmp_path / "clear.png"), (True, 0))
    assert bool((clear == 1.0).all())  # transparent on white, as a target is


def test_a_multi_control_refusal_names_where_the_controls_came_from(tmp_path):
    folder = _folder(tmp_path, [{"file_name": "a.png", "text": "x"}], controls=("controls/a_0.png", "controls/a_1.png"))
    media = _media(folder, family="flux_kontext", cond_image_dir=str(folder / "controls"))
    with pytest.raises(UserError, match=r"names 2 control images in `--cond_image_dir`"):
        media.screen(media.list_samples(), log=lambda m: None, quarantine=[])
    bare = _folder(tmp_path / "bare", [{"file_name": "a.png", "text": "x"}], controls=())
    with pytest.raises(UserError) as refused:
        _media(bare, family="flux_kontext").list_samples()
    assert "a list for several" not in str(refused.value)  # Kontext takes one
    with pytest.raises(UserError) as refused:
        _media(bare).list_samples()
    assert "a list for several" in str(refused.value)


def test_a_dataset_is_refused_for_an_edit_model_in_one_paragraph():
    from dit_lora.kit.edit_data import refuse_edit_options

    cfg = TrainConfig.for_family("flux_kontext", dataset_name="user/pairs", cond_image_column="before")
    with pytest.raises(UserError, match=r"--dataset_name is not read for them\. Save the dataset's images"):
        refuse_edit_options(cfg, "FLUX.1 Kontext")


class KeptSetup(ControlSetup):
    """An edit family's setup that records the validation controls it is handed."""

    def keep_validation_controls(self, comps, data, validation, paths):
        comps.state.kept = paths


def test_the_edit_setup_records_the_crop_and_keeps_the_validation_controls_only_when_validating():
    from dit_lora.contract.capabilities import TextSettings
    from dit_lora.contract.family import Components

    state = SimpleNamespace(text=None, crop=None, kept=None)
    encoders = SimpleNamespace(text_settings=lambda cfg: TextSettings(max_sequence_length=8))
    setup = KeptSetup(encoders, lambda comps: comps.state)
    comps = Components(model=None, encoders={}, state=state)
    cfg = TrainConfig.for_family("flux_kontext", resolution=32, seed=7, validation_prompt="make it red")
    setup.configure(comps, cfg)
    assert state.text == TextSettings(max_sequence_length=8) and state.crop == (bool(cfg.data.center_crop), 7)
    setup.inspect_samples(comps, cfg, [SimpleNamespace(conditions=("c1.png",))])
    assert state.kept == ["c1.png"]  # the first sample's, without --validation_image
    quiet = TrainConfig.for_family("flux_kontext", resolution=32)
    state.kept = None
    setup.inspect_samples(comps, quiet, [SimpleNamespace(conditions=("c1.png",))])
    assert state.kept is None  # no validation: nothing kept
