"""kit/reference_clips.py (an in-context family's reference clips), through LTX-2 IC-LoRA's data
handler: each clip finds its reference (a metadata column or a folder of same-named clips) or the run stops in one
paragraph, a changed reference is a new cache entry, a reference that cannot give its clip's frames leaves the clip
out as a bad clip is, and what an in-context run cannot take is refused before loading."""

from __future__ import annotations

import json

import pytest
from ltx2_configs import ltx2_cfg

from dit_lora.core.errors import UserError
from dit_lora.data.synthetic.clips import make_moving_square_dataset, write_moving_square_clip
from dit_lora.families.ltx2.spec import ltx2_spec


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """The tiny LTX2Pipeline saved as a diffusers folder."""
    from dit_lora.families.ltx2.demo import build_tiny_ltx2_pipeline

    return build_tiny_ltx2_pipeline(tmp_path_factory.mktemp("ltx2") / "tiny-ltx2", seed=0)


def _pairs(tmp_path, **kwargs):
    root = make_moving_square_dataset(tmp_path / "clips", n=3, num_frames=9, size=64, references=True, **kwargs)
    return root, [json.loads(line) for line in (root / "metadata.jsonl").read_text().splitlines()]


def _media(cfg):
    spec = ltx2_spec("ltx2_ic")
    return spec.data.data_handler(cfg, spec)


def test_each_clip_takes_the_reference_its_row_or_the_folder_names(tmp_path, tiny_folder):
    root, rows = _pairs(tmp_path)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root))
    samples = _media(cfg).list_samples()
    assert [s.conditions for s in samples] == [(str(root / r["reference_path"]),) for r in rows]
    assert all("references/" not in s.key for s in samples)  # a reference is no sample
    # a row naming none: the same-named clip of --reference_dir (musubi-tuner's and ai-toolkit's layout)
    (root / "metadata.jsonl").write_text("".join(json.dumps({"file_name": r["file_name"], "text": r["text"]}) + "\n"
                                                 for r in rows))
    folder = tmp_path / "refs"
    folder.mkdir()
    for r in rows:
        (folder / r["file_name"]).write_bytes((root / r["reference_path"]).read_bytes())
    by_folder = _media(ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root),
                                reference_dir=str(folder))).list_samples()
    assert [s.conditions for s in by_folder] == [(str(folder / r["file_name"]),) for r in rows]
    with pytest.raises(UserError) as missing:
        _media(cfg).list_samples()
    text = str(missing.value)
    assert text.startswith("3 clip(s) of --train_data_dir have no reference clip in any of `reference_path`")
    assert "--reference_dir" in text and "clip_00000.mp4" in text and "\n" not in text


def test_a_changed_reference_is_a_new_cache_entry(tmp_path, tiny_folder):
    root, rows = _pairs(tmp_path)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root))
    before = _media(cfg).list_samples()[0].content_id()
    write_moving_square_clip(root / rows[0]["reference_path"], direction="top to bottom", size=64, outline=True)
    assert _media(cfg).list_samples()[0].content_id() != before


def test_a_clip_whose_reference_is_too_short_is_left_out_as_a_bad_clip_is(tmp_path, tiny_folder):
    root, rows = _pairs(tmp_path)
    write_moving_square_clip(root / rows[1]["reference_path"], num_frames=5, size=64, outline=True)
    values = {"train_data_dir": str(root), "max_num_frames": 9, "height": 64, "width": 64}
    media = _media(ltx2_cfg(tiny_folder, family="ltx2_ic", max_bad_samples_fraction=0.5, **values))
    quarantine, lines = [], []
    kept = media.screen(media.list_samples(), log=lines.append, quarantine=quarantine)
    assert [s.key for s in kept] == ["clip_00000.mp4", "clip_00002.mp4"] and [s.index for s in kept] == [0, 1]
    assert quarantine == [{"key": "clip_00001.mp4", "reason": "its reference clip has 5 frame(s); its clip trains 9"}]
    assert any(line.startswith("reference clips: 2, each decoded frame for frame") for line in lines)
    media = _media(ltx2_cfg(tiny_folder, family="ltx2_ic", **values))  # one of three: over the default 5%
    with pytest.raises(UserError) as short:
        media.screen(media.list_samples(), log=lambda line: None, quarantine=[])
    text = str(short.value)
    assert "clip_00001.mp4" in text and "its reference clip has 5 frame(s)" in text and "--max_bad_samples_fraction" in text


@pytest.mark.parametrize("values,needle", [
    ({"reference_downscale_factor": 3}, "--reference_downscale_factor 3 does not fit the 9x64x64 bucket"),
    ({"cache_latents": False}, "--cache_latents false is not supported for LTX-2 IC-LoRA"),
    ({"validation_reference": "nowhere.mp4"}, "--validation_reference `nowhere.mp4` does not exist"),
])
def test_what_an_in_context_run_cannot_take_is_refused_before_loading(tmp_path, tiny_folder, values, needle):
    root, _ = _pairs(tmp_path)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root), max_num_frames=9, height=64, width=64,
                   frame_buckets="9x64x64", **values)
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        ltx2_spec("ltx2_ic").model.validate_config(cfg)


def test_a_reference_folder_inside_a_folder_of_captioned_clips_is_refused_before_loading(tmp_path, tiny_folder):
    """Without a metadata file every clip of the data folder is a training clip: references inside it would be read
    as clips without captions (a misleading paragraph), so the folder is refused first; with one, it is fine."""
    root, rows = _pairs(tmp_path)
    (root / "metadata.jsonl").unlink()
    for r in rows:
        (root / r["file_name"]).with_suffix(".txt").write_text(r["text"])
    values = {"train_data_dir": str(root), "reference_dir": str(root / "references"), "max_num_frames": 9,
              "height": 64, "width": 64, "frame_buckets": "9x64x64", "frame_sampling": "first"}
    with pytest.raises(UserError, match=r"--reference_dir `.*references` is inside --train_data_dir .* has no "
                                        r"metadata\.jsonl"):
        ltx2_spec("ltx2_ic").model.validate_config(ltx2_cfg(tiny_folder, family="ltx2_ic", **values))
    beside = tmp_path / "references"
    (root / "references").rename(beside)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", **{**values, "reference_dir": str(beside)})
    ltx2_spec("ltx2_ic").model.validate_config(cfg)
    samples = _media(cfg).list_samples()
    assert [s.conditions for s in samples] == [(str(beside / r["file_name"]),) for r in rows]


def test_references_at_another_frame_rate_are_counted_in_the_log(tmp_path, tiny_folder):
    """A reference is paired with its clip frame for frame; one written at another rate is said, never silently."""
    root, rows = _pairs(tmp_path)
    write_moving_square_clip(root / rows[0]["reference_path"], num_frames=9, size=64, fps=12, outline=True)
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", train_data_dir=str(root), max_num_frames=9, height=64, width=64)
    media, lines = _media(cfg), []
    kept = media.screen(media.list_samples(), log=lines.append, quarantine=[])
    assert len(kept) == 3
    said = [line for line in lines if line.startswith("reference clips: 3")]
    assert said and said[0].endswith("; 1 come at another frame rate than their clip"), said


def test_a_downscale_factor_keeps_the_automatic_buckets_on_its_grid(tmp_path, tiny_folder):
    """The automatic aspect buckets of an in-context run are multiples of the model's grid times the factor, so
    every reference stays on the grid: factor 2 with the default buckets is taken (it was refused over a bucket no clip
    used); a size off that grid is refused naming the factor."""
    from dit_lora.families.ltx2.spec import TASKS

    root, _ = _pairs(tmp_path)
    values = {"train_data_dir": str(root), "max_num_frames": 9, "height": 64, "width": 64, "frame_sampling": "first"}
    cfg = ltx2_cfg(tiny_folder, family="ltx2_ic", reference_downscale_factor=2, **values)
    buckets = TASKS["ltx2_ic"].video_buckets(cfg)
    assert len(buckets) > 1 and all(h % 16 == 0 and w % 16 == 0 for _, h, w in buckets)  # the tiny VAE's 8 x 2
    ltx2_spec("ltx2_ic").model.validate_config(cfg)
    assert any(h % 16 for _, h, w in TASKS["ltx2"].video_buckets(ltx2_cfg(tiny_folder, **values)))  # t2v: the 8 grid
    off = ltx2_cfg(tiny_folder, family="ltx2_ic", reference_downscale_factor=2, **{**values, "height": 72})
    with pytest.raises(UserError, match=r"--height 72 must be a multiple of 16 .*times --reference_downscale_factor 2"):
        ltx2_spec("ltx2_ic").model.validate_config(off)
