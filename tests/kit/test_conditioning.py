"""kit/conditioning.py: the conditioning image of image-to-video validation."""

from __future__ import annotations


def test_load_conditioning_image_fits_a_file_or_takes_the_first_frame(tmp_path):
    """--validation_image is cover-resized to the bucket; without it the first clip's first frame is used; a bad
    file and no samples are one paragraph each."""
    from types import SimpleNamespace

    import pytest
    from PIL import Image

    from dit_lora.core.errors import UserError
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.kit import load_conditioning_image

    Image.new("RGB", (100, 40), (200, 10, 10)).save(tmp_path / "wide.png")
    image = load_conditioning_image(str(tmp_path / "wide.png"), None, 32, 48)
    assert image.size == (48, 32) and image.getpixel((24, 16))[0] > 150
    clips = make_moving_square_dataset(tmp_path / "clips", n=1, num_frames=5, size=32)
    sample = SimpleNamespace(path=next(clips.glob("*.mp4")), key="clip")
    assert load_conditioning_image(None, [sample], 32, 32).size == (32, 32)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(UserError, match="cannot be read as an image"):
        load_conditioning_image(str(tmp_path / "bad.png"), None, 32, 32)
    with pytest.raises(UserError, match="set --validation_image"):
        load_conditioning_image(None, [], 32, 32)


def test_kept_conditioning_image_lives_in_the_run_state(tmp_path):
    """The typed-state path: taken once, kept in ``state.validation_image`` and written beside the adapter for the
    model card, returned afterwards; without a state (a card written without a run) it is loaded and nothing is kept."""
    from types import SimpleNamespace

    from PIL import Image

    from dit_lora.kit import kept_conditioning_image

    Image.new("RGB", (40, 40), (0, 0, 200)).save(tmp_path / "blue.png")
    frames = SimpleNamespace(video_buckets=lambda cfg: [(5, 32, 48)])
    cfg = SimpleNamespace(family_options=SimpleNamespace(validation_image=str(tmp_path / "blue.png")),
                          training=SimpleNamespace(output_dir=str(tmp_path / "out")))
    (tmp_path / "out").mkdir()
    state = SimpleNamespace(validation_image=None)
    first = kept_conditioning_image(frames, cfg, state, samples=[])
    assert state.validation_image is first and first.size == (48, 32)
    with Image.open(tmp_path / "out" / "card_input.png") as written:  # the card's first frame, as validation's
        assert written.size == (48, 32) and written.getpixel((0, 0)) == (0, 0, 200)
    assert kept_conditioning_image(frames, cfg, None).size == (48, 32)
    (tmp_path / "blue.png").unlink()  # a reload would now fail: the kept image is returned
    assert kept_conditioning_image(frames, cfg, state) is first


def test_a_missing_validation_image_is_refused_saying_what_unset_does(tmp_path):
    """``check_validation_image``: a given file passes, no option (a family without it) or an unset one passes, a
    missing file is one paragraph naming it and what leaving it unset does."""
    from types import SimpleNamespace

    import pytest

    from dit_lora.core.errors import UserError
    from dit_lora.kit.conditioning import check_validation_image

    image = tmp_path / "cond.png"
    image.write_bytes(b"")
    for options in (SimpleNamespace(validation_image=str(image)), SimpleNamespace(validation_image=None), object()):
        check_validation_image(SimpleNamespace(family_options=options), "take the first frame")
    missing = SimpleNamespace(family_options=SimpleNamespace(validation_image=str(tmp_path / "no.png")))
    with pytest.raises(UserError, match=r"^--validation_image `.*no\.png` does not exist\. Give an image file, or "
                                        r"leave it unset to take the first frame\.$"):
        check_validation_image(missing, "take the first frame")


def test_image_to_video_refuses_still_images_naming_the_alternative():
    """``refuse_stills``: clips (and samples not bucketed yet) pass; one-frame samples are one paragraph counting
    them, naming one, and the family that trains them."""
    from types import SimpleNamespace

    import pytest

    from dit_lora.core.errors import UserError
    from dit_lora.kit.conditioning import refuse_stills

    clip, unbucketed = SimpleNamespace(bucket=(9, 32, 32), key="a"), SimpleNamespace(bucket=None, key="b")
    refuse_stills([clip, unbucketed], "--family x")
    stills = [SimpleNamespace(bucket=(1, 32, 32), key="c.png"), SimpleNamespace(bucket=(1, 32, 32), key="d.png")]
    with pytest.raises(UserError, match=r"^2 training sample\(s\) are images, e\.g\. `c\.png`: .* train them with "
                                        r"--family x \(text-to-video\)\.$"):
        refuse_stills([clip, *stills], "--family x (text-to-video)")


def test_inspect_clips_refuses_stills_and_keeps_the_first_frame_for_image_to_video_only(monkeypatch):
    """``inspect_clips``: text-to-video takes stills and keeps nothing; image-to-video refuses them, else keeps the
    first clip's first frame in the run state."""
    from types import SimpleNamespace

    import pytest

    from dit_lora.core.errors import UserError
    from dit_lora.kit import conditioning

    kept = []
    monkeypatch.setattr(conditioning, "kept_conditioning_image", lambda *args: kept.append(args))
    task, still = SimpleNamespace(task="i2v"), SimpleNamespace(bucket=(1, 32, 32), key="a.png")
    conditioning.inspect_clips(SimpleNamespace(task="t2v"), None, None, [still], "--family x")
    assert kept == []
    with pytest.raises(UserError, match=r"are images, .* --family x"):
        conditioning.inspect_clips(task, None, None, [still], "--family x")
    clip = SimpleNamespace(bucket=(9, 32, 32), key="b.mp4")
    conditioning.inspect_clips(task, "cfg", "state", [clip], "--family x")
    assert kept == [(task, "cfg", "state", [clip])]
