"""data/data_sets.py and the weighted batch order: several data sets, each listed, screened and bucketed by the
family's own handler with its own options, repeated, kept apart in batches, drawn by weight (a seeded, resumable
order whose per-set counts match the weights) and weighted in the loss."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import yaml

from dit_lora.config import parse_config
from dit_lora.config.dataset_file import read_data_sets
from dit_lora.core.errors import UserError
from dit_lora.data.batches import EpochBatches, unpack_item
from dit_lora.data.cache import cache_files
from dit_lora.data.data_sets import SetsMedia, sample_config, set_config
from dit_lora.data.frames import resolution_buckets
from dit_lora.data.synthetic.shapes import make_shapes_dataset
from dit_lora.registry import get_spec


@pytest.fixture(scope="module")
def two_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("sets")
    return make_shapes_dataset(root / "small", n=4, size=64, seed=0), make_shapes_dataset(root / "wide", n=3, size=64,
                                                                                          seed=1)


def _media(tmp_path, sets, family="sana", **flags):
    path = tmp_path / "sets.yaml"
    path.write_text(yaml.safe_dump({"datasets": sets}))
    argv = ["--pretrained_model_name_or_path", "org/model", "--family", family, "--dataset_config", str(path)]
    for k, v in flags.items():
        argv += [f"--{k}", str(v)]
    cfg = parse_config(argv)
    return SetsMedia(cfg, get_spec(family))


def test_sets_are_listed_tagged_repeated_and_numbered(tmp_path, two_folders):
    small, wide = two_folders
    media = _media(tmp_path, [{"train_data_dir": str(small), "repeats": 3}, {"train_data_dir": str(wide)}])
    samples = media.list_samples()
    assert len(samples) == 4 * 3 + 3 and [s.index for s in samples] == list(range(15))
    assert [s.data_set for s in samples] == [0] * 12 + [1] * 3
    assert samples[0].key == "small/00000.png" and samples[12].key == "wide/00000.png"
    # each file's copies follow it and share its cache entry (encoded once); the first copy is not a repeat
    assert [s.repeat > 0 for s in samples[:3]] == [False, True, True]
    files = cache_files(tmp_path, "ns", samples[:12])
    assert len(set(files)) == 4 and files[0] == files[1] == files[2]


def test_each_set_is_screened_by_its_own_options_and_batches_never_mix_sets(tmp_path, two_folders):
    small, wide = two_folders
    media = _media(tmp_path, [{"train_data_dir": str(small), "resolution": 32, "name": "low"},
                              {"train_data_dir": str(wide), "loss_weight": 2.0}], resolution=64)
    lines: list[str] = []
    screened = media.screen(media.list_samples(), log=lines.append, quarantine=[])
    assert [s.bucket for s in screened] == [(32, 32)] * 4 + [(64, 64)] * 3  # each set at its own resolution
    text = "\n".join(lines)
    assert "data set 1/2 `low`: train_data_dir" in text and "data set 2/2 `wide`" in text and "loss weight 2" in text
    assert text.count("images per bucket") == 2  # a bucket table per set
    groups = media.groups(screened)
    assert set(groups[:4]).isdisjoint(groups[4:])
    mix = media.mix(screened)
    assert [mix.loss_weights[k] for k in mix.of_sample] == [1.0] * 4 + [2.0] * 3 and mix.weights is None
    # the uncached dataset reads each sample as its own set prepares it
    data = media.raw_dataset(screened)
    assert data[(0, False)]["pixel_values"].shape[-1] == 32 and data[(5, False)]["pixel_values"].shape[-1] == 64


def test_families_that_read_more_than_the_samples_are_refused(tmp_path, two_folders):
    small, _ = two_folders
    for family, words in (("dit", "class folders"), ("flux_kontext", "control images")):
        with pytest.raises(UserError) as err:
            _media(tmp_path, [{"train_data_dir": str(small)}], family=family)
        assert words in str(err.value) and "--train_data_dir" in str(err.value), str(err.value)


# ---- the weighted order ------------------------------------------------------------------------------------------
def _order(sizes, weights, batch=2, world=1, rank=0, seed=3):
    sets = [k for k, n in enumerate(sizes) for _ in range(n)]
    return EpochBatches(len(sets), batch, seed=seed, rank=rank, world_size=world, random_flip=False, groups=sets,
                        sets=sets, set_weights=weights), sets


def test_the_mix_of_batches_follows_the_weights_within_sampling_error():
    """A 0.7/0.3 mix of a large and a small set (the small one would give 1/11 of the batches unweighted): over 20
    epochs each set's share of the batches is within 4 standard deviations of its weight."""
    order, sets = _order([200, 20], [0.7, 0.3])
    counts, total = [0, 0], 0
    for epoch in range(20):
        for batch in order.batches(epoch):
            kinds = {sets[unpack_item(item)[0]] for item in batch}
            assert len(kinds) == 1  # one set per batch
            counts[kinds.pop()] += 1
            total += 1
    assert total == 20 * len(order) == 20 * 110  # the epoch keeps its length
    sigma = math.sqrt(total * 0.3 * 0.7)
    assert abs(counts[1] - 0.3 * total) < 4 * sigma, counts


def test_the_weighted_order_is_seeded_and_resumes_mid_epoch():
    order, _ = _order([9, 5], [0.5, 0.5])
    full = list(order.batches(4))
    assert list(order.batches(4, start=3)) == full[3:]
    assert list(_order([9, 5], [0.5, 0.5])[0].batches(4)) == full
    assert list(order.batches(5)) != full
    assert full != list(_order([9, 5], [0.5, 0.5], seed=4)[0].batches(4))


def test_ranks_take_the_same_set_at_every_step():
    sets = None
    orders = []
    for rank in range(2):
        order, sets = _order([12, 8], [0.2, 0.8], world=2, rank=rank)
        orders.append(list(order.batches(0)))
    assert sets is not None
    for a, b in zip(*orders):
        assert {sets[i[0]] for i in a} == {sets[i[0]] for i in b}
        assert not {i[0] for i in a} & {i[0] for i in b}


def test_a_weighted_set_without_a_batch_is_refused():
    with pytest.raises(UserError, match="Data set\\(s\\) 2 of the dataset config have a weight but give no batch: their usable samples \\(1\\)"):
        _order([8, 1], [0.5, 0.5], world=2)


def test_the_memory_plan_plans_every_sets_size(tmp_path, two_folders):
    """A set at a larger resolution than the run's: the plan's batches include its size (the largest bucket of
    each set, each size once)."""
    small, wide = two_folders
    media = _media(tmp_path, [{"train_data_dir": str(small)}, {"train_data_dir": str(wide), "resolution": 128},
                              {"train_data_dir": str(wide), "name": "again"}], resolution=64, aspect_buckets="square")
    shapes = [shape for _, shape in get_spec("sana").plan.pixel_batches(media.cfg)]
    assert sorted(s[-1] for s in shapes) == [64, 128]


def test_a_sets_listing_and_screening_errors_name_the_set(tmp_path, two_folders):
    small, _ = two_folders
    media = _media(tmp_path, [{"train_data_dir": str(small)}, {"train_data_dir": str(tmp_path / "missing")}])
    with pytest.raises(UserError) as err:
        media.list_samples()
    assert str(err.value).startswith("Data set 2 (`missing`) of the dataset config") and "missing" in str(err.value)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.png").write_bytes(b"not an image")
    (broken / "a.txt").write_text("a caption")
    media = _media(tmp_path, [{"train_data_dir": str(small)}, {"train_data_dir": str(broken)}])
    with pytest.raises(UserError) as err:
        media.screen(media.list_samples(), log=lambda line: None, quarantine=[])
    assert str(err.value).startswith("Data set 2 (`broken`) of the dataset config") and "broken/a.png" in str(err.value)


def test_a_set_whose_handler_keeps_nothing_is_refused(tmp_path, two_folders):
    """A handler that leaves a set empty without refusing (each family's own screening normally refuses first):
    the set is not trained silently without its samples."""
    small, wide = two_folders
    path = tmp_path / "sets.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": str(small)}, {"train_data_dir": str(wide)}]}))
    cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--dataset_config",
                        str(path)])
    spec = get_spec("sana")

    class KeepsNoWide:
        data_sets, noun, cacheable, encode_batch_size, collate = True, "image", True, 1, staticmethod(list)

        def __init__(self, config):
            self.inner = spec.data.data_handler(config, spec)
            self.wide = config.data.train_data_dir == str(wide)

        def list_samples(self):
            return self.inner.list_samples()

        def screen(self, samples, **kwargs):
            return [] if self.wide else self.inner.screen(samples, **kwargs)

    media = SetsMedia(cfg, spec, make=KeepsNoWide)
    with pytest.raises(UserError, match="Data set 2 \\(`wide`\\) .* has no usable sample: all 3 were left out"):
        media.screen(media.list_samples(), log=lambda line: None, quarantine=[])


def test_the_class_images_are_captioned_by_the_class_prompt_or_their_own_never_the_instance_prompt(tmp_path,
                                                                                                 two_folders, capsys):
    """--with_prior_preservation without --class_prompt: the class images keep their own captions (the run's
    --instance_prompt would teach the identifier to the class); with it, every one is the class prompt; the first
    --num_class_images are taken, the user's own first."""
    small, wide = two_folders
    base = ["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--train_data_dir", str(small),
            "--instance_prompt", "a photo of sks dog", "--with_prior_preservation", "--class_data_dir", str(wide)]
    media = SetsMedia(parse_config(base + ["--num_class_images", "2"]), get_spec("sana"))
    samples = media.list_samples()
    mine, classes = samples[:4], samples[4:]
    assert {s.caption for s in mine} == {"a photo of sks dog"} and len(classes) == 2
    assert "sks" not in " ".join(s.caption for s in classes) and classes[0].key == "class/00000.png"
    lines: list[str] = []
    media.screen(samples, log=lines.append, quarantine=[])
    assert "the first 2 of its 3, your own first (--num_class_images)" in "\n".join(lines)
    media = SetsMedia(parse_config(base + ["--class_prompt", "a photo of dog"]), get_spec("sana"))
    capsys.readouterr()
    assert {s.caption for s in media.list_samples()[4:]} == {"a photo of dog"}
    said = capsys.readouterr().out  # issue 76: the class images were said "captioned" by --instance_prompt
    assert "--class_prompt: all 3 image(s) of --class_data_dir are captioned 'a photo of dog'" in said
    assert said.count("--instance_prompt:") == 1 and "of --train_data_dir are captioned 'a photo of sks dog'" in said
    with pytest.raises(UserError) as err:
        SetsMedia(parse_config(base[:-1] + [str(tmp_path / "no-such")]), get_spec("sana")).list_samples()
    assert str(err.value).startswith("The class images of --with_prior_preservation (--class_data_dir")


def test_too_few_class_images_for_the_processes_is_one_paragraph():
    from dit_lora.data.batches import paired_order

    order = EpochBatches(8, 1, seed=0, rank=0, world_size=2, random_flip=False)
    with pytest.raises(UserError, match="The 1 usable class image\\(s\\) of prior preservation give no batch"):
        paired_order(order, None, 1, offset=8)


def test_repeats_lists_every_sample_that_many_times_encoded_once(tmp_path, two_folders):
    """diffusers' DreamBooth `--repeats N`: the run's data one set, each sample N times (copies of one cache entry)."""
    small, _ = two_folders
    cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--train_data_dir",
                        str(small), "--repeats", "3"])
    media = SetsMedia(cfg, get_spec("sana"))
    samples = media.list_samples()
    assert len(samples) == 12 and len(set(cache_files(tmp_path, "ns", samples))) == 4
    assert [s.repeat > 0 for s in samples[:3]] == [False, True, True] and samples[0].key == "instance/00000.png"
    lines: list[str] = []
    media.screen(samples, log=lines.append, quarantine=[])
    assert "data set 1/1 `instance`: train_data_dir" in lines[0] and "(3 repeats)" in lines[0]


def test_class_images_that_all_failed_to_encode_stop_the_run():
    """Every class image left out while caching: the run stops (it would train without prior preservation)."""
    from dit_lora.data.data_sets import SetMix
    from dit_lora.data.prepare import _paired
    from dit_lora.data.prepared_data import PreparedData

    mix = SetMix(("instance", "class"), None, (1.0, 1.0), (0, 0), (False, True))
    with pytest.raises(UserError, match="No class image of prior preservation could be encoded"):
        _paired(PreparedData(None, list, [None, None], True, sets=mix))
    kept = [SimpleNamespace(data_set=0)] * 2 + [SimpleNamespace(data_set=1)]
    assert _paired(PreparedData(None, list, kept, True, sets=mix.for_samples(kept))).collate.start == 2


def test_the_plan_counts_a_paired_micro_batch_twice(two_folders):
    """With class images a micro-batch holds as many of them as of its own images: the memory plan's batches are
    twice --train_batch_size (each set's size)."""
    from dit_lora.data.data_sets import set_configs

    small, wide = two_folders
    cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--train_data_dir",
                        str(small), "--train_batch_size", "3", "--with_prior_preservation", "--class_data_dir",
                        str(wide), "--resolution", "64", "--aspect_buckets", "square"])
    assert [c.training.train_batch_size for c in set_configs(cfg)] == [6, 6]
    assert {shape[0] for _, shape in get_spec("sana").plan.pixel_batches(cfg)} == {6}


class _Clips:
    """A video family's buckets without a model: --frame_buckets, else its sizes or 81x480x832."""

    def video_buckets(self, cfg):
        if cfg.video.frame_buckets:
            return resolution_buckets(cfg.video.frame_buckets)
        return [(cfg.video.max_num_frames or 81, cfg.video.height or 480, cfg.video.width or 832)]


def test_the_validation_samples_take_a_sets_size_when_the_run_gives_none_and_say_it(tmp_path):
    path = tmp_path / "sets.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": "img", "height": 64, "width": 64},
                                                 {"train_data_dir": "clips", "frame_buckets": "1x64x64,9x64x48"}]}))
    base = ["--pretrained_model_name_or_path", "org/model", "--family", "wan", "--dataset_config", str(path)]
    spec = SimpleNamespace(video_frames=_Clips())
    # unset sizes (a recipe's cleared with "") are no size: not the checkpoint's 81x480x832, the largest bucket of
    # the first set giving its frames (a set of images gives none: 81x64x64 would be the checkpoint's count)
    cfg = parse_config([*base, "--height", "", "--width", ""])
    sized, line = sample_config(cfg, spec)
    assert sized.video.frame_buckets == "9x64x48" and sized.video.height is None
    assert line == ("validation samples: 9x64x48 (frames x height x width; data set `clips`'s size: the run gives no "
                    "--max_num_frames/--height/--width/--frame_buckets of its own)")
    cfg = parse_config([*base, "--max_num_frames", "5", "--height", "32", "--width", "32"])
    sized, line = sample_config(cfg, spec)
    assert sized is cfg and line.startswith("validation samples: 5x32x32") and "the run's --max_num_frames" in line
    # the run's sizes yield to the set's own buckets for that set only
    img, clips = read_data_sets(path)
    assert set_config(cfg, clips).video.height is None and set_config(cfg, clips).video.max_num_frames is None
    assert (set_config(cfg, img).video.max_num_frames, set_config(cfg, img).video.height) == (5, 64)
    images = tmp_path / "images.yaml"
    images.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": "a", "resolution": 32}]}))
    cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--dataset_config",
                        str(images)])
    sized, line = sample_config(cfg, SimpleNamespace(video_frames=None))
    assert sized.data.resolution == 32 and line.startswith("validation samples: 32 x 32 px (data set `a`'s size")


def test_a_sets_own_frame_buckets_in_place_of_the_runs_sizes_are_said_in_its_header(tmp_path):
    path = tmp_path / "sets.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"train_data_dir": "clips", "frame_buckets": "9x64x64"}]}))
    cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "wan", "--dataset_config",
                        str(path), "--height", "32", "--width", "32"])
    media = SetsMedia.__new__(SetsMedia)
    media.cfg, media.sets, media.class_listed = cfg, read_data_sets(path), 0
    assert media._header(0).endswith("(its own frame buckets in place of the run's --height/--width)")


def test_a_sets_caption_advice_names_its_own_key_which_wins_over_the_flag(tmp_path, capsys):
    # "read with --caption_extension .txt": the flag does not reach the set, whose own `caption_extension` wins
    folder = tmp_path / "img"
    make_shapes_dataset(folder, n=2, size=64, seed=0)
    (folder / "metadata.jsonl").unlink()
    for png in folder.glob("*.png"):
        png.with_suffix(".txt").write_text("a shape")
    media = _media(tmp_path, [{"train_data_dir": str(folder), "caption_extension": ".caption"}])
    with pytest.raises(UserError) as err:
        media.list_samples()
    text = " ".join(str(err.value).split())
    assert text.startswith("Data set 1 (`img`) of the dataset config") and "paragraph below" not in text
    assert "The .txt files beside them are read with `caption_extension: .txt`." in text and "--caption" not in text
    assert "set `caption_extension: .txt` in the set to use them" in capsys.readouterr().out


def test_a_peer_sets_listing_error_names_its_own_key(tmp_path):
    path = tmp_path / "musubi.toml"
    path.write_text(f'[[datasets]]\nimage_directory = "{tmp_path / "typo"}"\n')
    cfg = parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "sana", "--dataset_config",
                        str(path)])
    with pytest.raises(UserError) as err:
        SetsMedia(cfg, get_spec("sana")).list_samples()
    assert f'`image_directory = "{tmp_path / "typo"}"` does not exist' in " ".join(str(err.value).split())


class _EightFrames:
    """A video family of LTX-2's rules: frames 8k+1, sides multiples of 32, trained at 25x512x768."""

    def video_buckets(self, cfg):
        from dit_lora.kit.video_sizes import clip_buckets

        return clip_buckets(cfg, (25, 512, 768), 32, 8, "LTX-2", "VAE 32x downsampling times patch 1")


def _peer_cfg(tmp_path, name, text, *flags):
    path = tmp_path / name
    path.write_text(text)
    return parse_config(["--pretrained_model_name_or_path", "org/model", "--family", "wan", "--dataset_config",
                         str(path), *flags])


def _header(cfg, frames=None):
    from dit_lora.data.data_sets import run_sets

    media = SetsMedia.__new__(SetsMedia)
    media.cfg, media.sets, media.class_listed = cfg, run_sets(cfg, frames=frames)[0], 0
    return media._header(0)


def test_a_runs_explicit_frame_sampling_takes_the_place_of_musubi_tuners_implied_head(tmp_path):
    # every musubi-tuner clip set said `first` over the run's explicit --frame_sampling uniform, without a word
    toml = '[[datasets]]\nvideo_directory = "v"\nresolution = [64, 48]\ntarget_frames = [9]\n'
    cfg = _peer_cfg(tmp_path, "m.toml", toml, "--frame_sampling", "uniform")
    (clips,) = read_data_sets(cfg.data.dataset_config, video=True)
    assert set_config(cfg, clips).video.frame_sampling == "uniform"
    assert _header(cfg).endswith("(the run's --frame_sampling uniform in place of musubi-tuner's default "
                                 "`frame_extraction = 'head'`)")
    plain = _peer_cfg(tmp_path, "m.toml", toml)  # no flag: musubi-tuner's head, the clip's own speed
    assert set_config(plain, clips).video.frame_sampling == "first" and "in place of" not in _header(plain)


def test_musubi_tuners_full_extraction_takes_the_familys_frame_rule_and_validates_at_its_default(tmp_path):
    # `full` was a bucket of every 4k+1 count, which an 8k+1 family refused naming `--frame_buckets`; its validation
    # took the longest bucket (musubi-tuner's max_frames, 129 by default) whatever the clips' lengths
    cfg = _peer_cfg(tmp_path, "full.toml", '[[datasets]]\nvideo_directory = "v"\nresolution = [64, 32]\n'
                    'frame_extraction = "full"\nmax_frames = 41\n', "--height", "", "--width", "")
    spec = SimpleNamespace(video_frames=_EightFrames())
    sized, line = sample_config(cfg, spec)
    assert sized.video.frame_buckets == "25x32x64"
    assert "its frames at most the checkpoint's default 25 (its buckets go up to 41)" in line
    assert _header(cfg, spec.video_frames).endswith(
        "(`frame_extraction = 'full'`: frame buckets of 1, 9, 17, ..., 41 frames, the counts the model takes)")


def test_ai_toolkits_clip_resolution_takes_the_familys_size_step_and_says_so(tmp_path):
    # 720 was rounded by 16 for every family: a family of sides in 32s refused `height`, a key the file lacks
    job = {"job": "extension", "config": {"process": [{"datasets": [{"folder_path": "/c", "resolution": 720}]}]}}
    cfg = _peer_cfg(tmp_path, "job.yaml", yaml.safe_dump(job), "--max_num_frames", "")
    spec = SimpleNamespace(video_frames=_EightFrames())
    sized, line = sample_config(cfg, spec)
    assert sized.video.frame_buckets.endswith("x704x704") and "data set `c`'s size" in line
    assert _header(cfg, spec.video_frames).endswith(
        "(`resolution: 720` as clips of about 704 x 704 px, the largest side up to it the model takes)")
    assert "as clips of" not in _header(cfg, _Clips())  # a family of sides in 16s takes 720 as it is


def test_a_sets_listing_lines_are_in_its_terms_and_stdout_is_left_alone(tmp_path, two_folders, capsys):
    """A set's listing says its lines in the set's terms through the listing's logger (data/listing.py), while
    ``sys.stdout`` stays the process's own: a print beside it is not rewritten."""
    import sys

    from dit_lora.data import listing

    small, _ = two_folders
    media = _media(tmp_path, [{"train_data_dir": str(small)}])
    media._in_set_terms = lambda k, line: f"set {k + 1}: {line.upper()}"
    stdout = sys.stdout

    def listed():
        assert sys.stdout is stdout  # not redirected while the set is listed
        listing.say("found 4 images with --caption_extension .txt")
        print("a print of its own")
        return []

    media.children[0].list_samples = listed
    assert media.list_samples() == []
    out = capsys.readouterr().out
    assert "set 1: FOUND 4 IMAGES WITH --CAPTION_EXTENSION .TXT\n" in out and "a print of its own\n" in out
    listing.say("after the set")
    assert capsys.readouterr().out == "after the set\n"


