"""Video data through the training data pipeline: list, screen, bucket, cache, batch (a fake video family, CPU);
images among the clips as one-frame clips."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

pytest.importorskip("av")

from dit_lora.commands.cli import main as cli_main  # noqa: E402
from dit_lora.config import TrainConfig  # noqa: E402
from dit_lora.data import batches as batch_lib  # noqa: E402
from dit_lora.data.cache import cache_namespace  # noqa: E402
from dit_lora.data.prepare import prepare_data  # noqa: E402
from dit_lora.data.prepare_cache import cache_root_for  # noqa: E402
from dit_lora.data.video import VideoSample, decode_clip, resolution_buckets, validate_video_samples  # noqa: E402
from dit_lora.data.video_prepare import VideoMedia, load_video_dataset, materialise_clip  # noqa: E402
from dit_lora.data.synthetic.clips import (  # noqa: E402
    make_moving_square_dataset,
    write_corrupt_clip,
    write_moving_square_clip,
    write_truncated_clip,
)
from dit_lora.core.errors import UserError  # noqa: E402
from dit_lora.contract.spec import FamilyInfo, FamilySpec  # noqa: E402
from dit_lora.kit import components as base  # noqa: E402
from dit_lora.output.names import QUARANTINE_FILE  # noqa: E402
from PIL import Image  # noqa: E402


def _namespace(cfg, family) -> str:
    """The latent-cache folder a run with ``cfg`` uses (what its handler's identity hashes to)."""
    return cache_namespace(family.data.data_handler(cfg, family).namespace_identity())


class FakeVideoParts:
    """A video family's components in one stand-in whose 'VAE' average-pools: 4x in time (first frame alone), 8x in
    space; it records what it inspects and encodes."""

    caption_source = "captions"
    requires_captions = True

    def __init__(self) -> None:
        self.inspected: list = []
        self.encoded: list[tuple[int, ...]] = []  # pixel shape of every encode_images call

    def data_handler(self, cfg, spec):
        return VideoMedia(cfg, spec, cache_root_for(cfg.data))

    def build_data(self, cfg, spec, comps, accelerator):
        return base.prepare_and_release(cfg, spec, comps, accelerator)

    def video_buckets(self, cfg):
        if cfg.video.frame_buckets:
            return resolution_buckets(cfg.video.frame_buckets)
        return [(cfg.video.max_num_frames or 9, cfg.video.height or 32, cfg.video.width or 32)]

    def cache_identity(self, cfg, comps=None):
        return {"model": "fake-video", "version": 1}

    def encode_images(self, comps, pixel_values):
        self.encoded.append(tuple(pixel_values.shape))
        b, f, c, h, w = pixel_values.shape
        frames = pixel_values[:, ::4]  # (F - 1) // 4 + 1 latent frames
        pooled = F.avg_pool2d(frames.reshape(-1, c, h, w), 8).reshape(b, frames.shape[1], c, h // 8, w // 8)
        return {"latents": pooled, "image_latents": pooled[:, :1] * 0.5}

    def encode_prompts(self, comps, captions, *, with_negative=False):
        return {"prompt_embeds": torch.tensor([[float(len(c)), float(sum(map(ord, c)) % 97)] for c in captions])}

    def prepare_batch(self, comps, batch, device, cached):
        return base.encoded_batch(self, comps, batch, device, cached)

    def configure(self, comps, cfg):
        pass

    def inspect_samples(self, comps, cfg, samples):
        self.inspected.append(list(samples))

    def _unused(self, *args, **kwargs):
        raise NotImplementedError

    validate_config = load_components = lora_targets = compute_loss = _unused
    save_adapter = load_pipeline_with_adapter = _unused


class FakeVideoFamily(FamilySpec):
    """The spec of a :class:`FakeVideoParts` (each component that one object); the tests read its records through
    the spec (``family.encoded``)."""

    parts = FakeVideoParts
    family_name = "fake_video"
    frame_rate_too = False  # whether the parts fill the frame_rate component too

    def __init__(self) -> None:
        p = self.parts()
        super().__init__(name=self.family_name, info=FamilyInfo(pipeline_class_name="FakeVideoPipeline"), model=p,
                         data=p, loss=p, adapter=p, encoders=p, captions=p, video_frames=p, setup=p,
                         frame_rate=p if self.frame_rate_too else None)

    def __getattr__(self, attr):  # only for what a spec has not: the stand-in's records and methods
        if attr == "model":
            raise AttributeError(attr)
        return getattr(self.model, attr)


def _acc():
    return types.SimpleNamespace(is_main_process=True, process_index=0, num_processes=1, wait_for_everyone=lambda: None)


def _cfg(tmp_path: Path, data: Path | None, **overrides) -> TrainConfig:
    values = dict(family="fake_video", train_data_dir=str(data) if data else None, output_dir=str(tmp_path / "out"),
                  cache_dir=str(tmp_path / "cache"), max_num_frames=9, height=32, width=32, train_batch_size=2,
                  seed=0, max_bad_samples_fraction=0.05)
    values.update(overrides)
    return TrainConfig.for_family(**values)


def _snapshot(files) -> dict[str, tuple[int, bytes]]:
    return {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in files}


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    """Six 9-frame 32 px moving-square clips with metadata.jsonl."""
    return make_moving_square_dataset(tmp_path_factory.mktemp("clips") / "meta", n=6, num_frames=9, size=32, seed=0)


@pytest.fixture()
def bad_clips(tmp_path, clips) -> Path:
    """The six clips plus a corrupt, a truncated, a too-short (5 frames) and a missing clip."""
    root = tmp_path / "bad"
    shutil.copytree(clips, root)
    write_corrupt_clip(root / "corrupt.mp4")
    write_truncated_clip(root / "clip_00000.mp4", root / "truncated.mp4")
    write_moving_square_clip(root / "short.mp4", num_frames=5, size=32)
    with open(root / "metadata.jsonl", "a") as handle:
        for name in ("corrupt.mp4", "truncated.mp4", "short.mp4", "missing.mp4"):
            handle.write(json.dumps({"file_name": name, "text": f"bad {name}"}) + "\n")
    return root


# ---------------------------------------------------------------------------------------------
# listing, screening, caching
# ---------------------------------------------------------------------------------------------


def test_bad_clips_quarantined_cached_and_reused(tmp_path, bad_clips):
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, bad_clips, max_bad_samples_fraction=0.5)
    data = prepare_data(cfg, family, None, _acc())
    reasons = {q["key"]: q["reason"] for q in data.quarantine}
    assert set(reasons) == {"corrupt.mp4", "truncated.mp4", "short.mp4", "missing.mp4"}
    assert "not a readable video" in reasons["corrupt.mp4"]
    assert "truncated" in reasons["truncated.mp4"]
    assert reasons["short.mp4"] == "too short (5 frame(s), need at least 9 for --max_num_frames 9)"
    assert reasons["missing.mp4"] == "file not found"
    assert json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text()) == data.quarantine

    assert data.cached and len(data) == 6 and data.groups is None
    assert all(isinstance(s, VideoSample) and s.bucket == (9, 32, 32) for s in data.samples)
    assert [s.key for s in family.inspected[0]] == [s.key for s in data.samples]
    # one clip per encode call; clips 0 and 2 of the fixture are the same bytes and caption: one entry (20e329b)
    assert family.encoded == [(1, 9, 3, 32, 32)] * 5
    item = data.dataset[(2, False)]
    assert set(item) == {"latents", "image_latents", "prompt_embeds", "sample_index"}
    assert item["latents"].shape == (3, 3, 4, 4) and item["image_latents"].shape == (1, 3, 4, 4)
    pixels = decode_clip(data.samples[2].path, 9, 32, 32, start="uniform")
    expected = family.encode_images(None, pixels[None])
    assert torch.allclose(item["latents"], expected["latents"][0])
    assert torch.allclose(item["image_latents"], expected["image_latents"][0])

    # A second run hits every entry: nothing is encoded, no file is rewritten.
    files = data.dataset.files
    before = _snapshot(files)
    again = FakeVideoFamily()
    second = prepare_data(cfg, again, None, _acc())
    assert again.encoded == [] and second.dataset.files == files and _snapshot(files) == before

    # The entry name carries the bucket: other frames or sizes are cache misses, in the same namespace.
    for change in ({"max_num_frames": 5}, {"height": 48}, {"width": 16}):
        fam = FakeVideoFamily()
        other = prepare_data(_cfg(tmp_path, bad_clips, max_bad_samples_fraction=0.5, **change), fam, None, _acc())
        assert len(fam.encoded) == len(set(other.dataset.files)) and not set(other.dataset.files) & set(files)
        assert {f.parent for f in other.dataset.files} == {files[0].parent}
    assert _snapshot(files) == before


def test_txt_layout_shares_the_cache_and_mismatched_lines_stop(tmp_path, clips):
    prepare_data(_cfg(tmp_path, clips), FakeVideoFamily(), None, _acc())
    # The same clip files in the prompts.txt + videos.txt layout (copied: the demo encoder is not always
    # bit-identical run to run).
    txt = tmp_path / "txt"
    shutil.copytree(clips, txt, ignore=shutil.ignore_patterns("metadata.jsonl"))
    rows = [json.loads(line) for line in (clips / "metadata.jsonl").read_text().splitlines()]
    (txt / "prompts.txt").write_text("".join(r["text"] + "\n" for r in rows))
    (txt / "videos.txt").write_text("".join(r["file_name"] + "\n" for r in rows))
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, txt, caption_column="prompts.txt", video_column="videos.txt")
    data = prepare_data(cfg, family, None, _acc())
    # Same bytes and captions, another folder: the entries are found by content.
    assert len(data) == 6 and family.encoded == []
    assert [s.key for s in data.samples] == [f"clip_{i:05d}.mp4" for i in range(6)]

    (txt / "videos.txt").write_text((txt / "videos.txt").read_text() + "clip_00000.mp4\n")
    with pytest.raises(UserError) as err:
        prepare_data(cfg, FakeVideoFamily(), None, _acc())
    text = str(err.value)
    assert "6 caption line(s)" in text and "7 video line(s)" in text and "--video_column videos.txt" in text


def test_every_clip_too_short_names_the_option(tmp_path, clips):
    with pytest.raises(UserError) as err:
        prepare_data(_cfg(tmp_path, clips, max_num_frames=13), FakeVideoFamily(), None, _acc())
    text = " ".join(str(err.value).split())
    assert "--max_num_frames 13" in text and "longest has 9" in text and "e.g. 9" in text
    assert len(json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())) == 6

    with pytest.raises(UserError, match=r"--frame_buckets 13x32x32,17x32x32"):
        prepare_data(_cfg(tmp_path, clips, frame_buckets="13x32x32,17x32x32"), FakeVideoFamily(), None, _acc())


def test_random_flip_caches_every_key_flipped(tmp_path, clips):
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, clips, random_flip=True)
    data = prepare_data(cfg, family, None, _acc())
    assert _namespace(cfg, family) != _namespace(_cfg(tmp_path, clips), family)
    assert data.dataset.files[0].parent.name == _namespace(cfg, family)
    for index, f in enumerate(data.dataset.files):
        stored = load_file(str(f))
        assert set(stored) == {"latents", "image_latents", "latents_flipped", "image_latents_flipped", "prompt_embeds"}
        plain, flipped = data.dataset[(index, False)], data.dataset[(index, True)]
        assert set(plain) == set(flipped) == {"latents", "image_latents", "prompt_embeds", "sample_index"}
        assert torch.equal(plain["latents"], stored["latents"])
        assert torch.equal(flipped["latents"], stored["latents_flipped"])
        assert torch.equal(flipped["image_latents"], stored["image_latents_flipped"])
        assert torch.equal(flipped["prompt_embeds"], plain["prompt_embeds"])
    # The flipped entry is the encoding of the horizontally mirrored clip (one moving sideways, so it differs).
    index = next(i for i, s in enumerate(data.samples) if "left" in s.caption)
    pixels = decode_clip(data.samples[index].path, 9, 32, 32, start="uniform")
    mirrored = family.encode_images(None, pixels.flip(-1)[None])
    assert torch.allclose(data.dataset[(index, True)]["latents"], mirrored["latents"][0])
    assert not torch.allclose(data.dataset[(index, True)]["latents"], data.dataset[(index, False)]["latents"])


def test_uncached_clips_give_the_same_batches(tmp_path, clips):
    family = FakeVideoFamily()
    cached = prepare_data(_cfg(tmp_path, clips, random_flip=True), family, None, _acc())
    raw = prepare_data(_cfg(tmp_path, clips, random_flip=True, cache_latents=False), family, None, _acc())
    assert not raw.cached and isinstance(raw.dataset, batch_lib.RawVideoDataset)
    items = [(0, False), (3, True)]
    got = family.prepare_batch(None, batch_lib.collate([raw.dataset[i] for i in items]), "cpu", cached=False)
    want = family.prepare_batch(None, batch_lib.collate([cached.dataset[i] for i in items]), "cpu", cached=True)
    assert set(got) == set(want) == {"latents", "image_latents", "prompt_embeds", "sample_index"}
    for key in ("latents", "image_latents", "prompt_embeds"):
        assert got[key].shape == want[key].shape
        assert torch.allclose(got[key], want[key], atol=1e-6), key
    assert got["sample_index"] == want["sample_index"] == [0, 3]


# ---------------------------------------------------------------------------------------------
# buckets and batch order
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, clips) -> Path:
    """Six 9-frame clips and four 5-frame clips, plus one 3-frame clip too short for any bucket."""
    root = tmp_path_factory.mktemp("mixed") / "mixed"
    shutil.copytree(clips, root)
    with open(root / "metadata.jsonl", "a") as handle:
        for i, frames in enumerate([5, 5, 5, 5, 3]):
            name = f"short_{i}.mp4"
            write_moving_square_clip(root / name, num_frames=frames, size=32, color="blue")
            handle.write(json.dumps({"file_name": name, "text": f"a short clip {i}"}) + "\n")
    return root


def test_buckets_assign_group_and_recache_only_what_changed(tmp_path, mixed):
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, mixed, frame_buckets="9x32x32,5x32x32", max_bad_samples_fraction=0.1)
    data = prepare_data(cfg, family, None, _acc())
    assert [q["key"] for q in data.quarantine] == ["short_4.mp4"]
    assert data.quarantine[0]["reason"] == "too short (3 frame(s), need at least 5 for --frame_buckets 9x32x32,5x32x32)"
    buckets = {s.key: s.bucket for s in data.samples}
    assert all(buckets[f"clip_{i:05d}.mp4"] == (9, 32, 32) for i in range(6))
    assert all(buckets[f"short_{i}.mp4"] == (5, 32, 32) for i in range(4))
    assert data.groups == [0 if s.bucket[0] == 9 else 1 for s in data.samples]
    # clips 0 and 2 of the fixture are the same bytes and caption: one cache entry, encoded once
    assert sorted(family.encoded) == sorted([(1, 9, 3, 32, 32)] * 5 + [(1, 5, 3, 32, 32)] * 4)
    assert data.dataset[(data.groups.index(1), False)]["latents"].shape == (2, 3, 4, 4)

    # Changing one bucket re-encodes only its clips.
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, mixed, frame_buckets="9x32x32,5x16x16", max_bad_samples_fraction=0.1)
    prepare_data(cfg, family, None, _acc())
    assert family.encoded == [(1, 5, 3, 16, 16)] * 4

    # Each bucket is a batch group: no batch mixes them, all ranks agree on the count and on the group per step.
    groups = data.groups
    for world in (1, 2):
        for batch_size in (1, 2, 3):
            orders = [batch_lib.EpochBatches(len(groups), batch_size, seed=3, rank=r, world_size=world,
                                             random_flip=False, groups=groups) for r in range(world)]
            assert len({len(o) for o in orders}) == 1
            for epoch in (0, 1):
                per_rank = [list(o.batches(epoch)) for o in orders]
                assert all(len(b) == len(orders[0]) for b in per_rank)
                for step in zip(*per_rank):
                    kinds = {groups[i] for batch in step for i, _ in batch}
                    assert len(kinds) == 1 and all(batch for batch in step)
                    assert all(len(batch) <= batch_size for batch in step)
                seen = [i for batches in per_rank for batch in batches for i, _ in batch]
                assert len(seen) == len(set(seen))


def _old_order(num_samples, batch_size, *, seed, rank, world_size, random_flip, epoch, start=0):
    """The batch order before groups existed (kept here verbatim as the reference)."""
    from dit_lora.data.transforms import flip_decision

    per_rank = num_samples // world_size
    gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(num_samples, generator=gen)[rank::world_size][:per_rank].tolist()
    for b in range(start, -(-per_rank // batch_size)):
        chunk = order[b * batch_size : (b + 1) * batch_size]
        yield [(i, random_flip and flip_decision(seed, epoch, i)) for i in chunk]


def test_ungrouped_order_is_unchanged_and_grouped_order_resumes():
    # Recorded with the implementation before groups existed: 10 samples, batch 3, 2 ranks, epoch 1, flips on.
    recorded = {
        0: [[[(5, False), (1, True), (0, False)], [(9, True), (7, True)]],
            [[(6, False), (2, True), (8, True)], [(3, False), (4, True)]]],
        42: [[[(7, True), (2, True), (8, False)], [(4, False), (0, False)]],
             [[(9, True), (1, False), (6, True)], [(5, False), (3, False)]]],
    }
    for seed, want in recorded.items():
        for groups in (None, [7] * 10):
            got = [list(batch_lib.EpochBatches(10, 3, seed=seed, rank=r, world_size=2, random_flip=True,
                                               groups=groups).batches(1)) for r in range(2)]
            assert got == want
    for n, bs, world, seed in ((16, 4, 1, 0), (37, 3, 2, 5), (9, 2, 3, 1)):
        for rank in range(world):
            for epoch, start in ((0, 0), (2, 1)):
                order = batch_lib.EpochBatches(n, bs, seed=seed, rank=rank, world_size=world, random_flip=True)
                assert list(order.batches(epoch, start)) == list(
                    _old_order(n, bs, seed=seed, rank=rank, world_size=world, random_flip=True, epoch=epoch,
                               start=start))

    groups = [0, 1, 2] * 7 + [1, 1]
    order = batch_lib.EpochBatches(len(groups), 2, seed=9, rank=1, world_size=2, random_flip=True, groups=groups)
    full = list(order.batches(4))
    assert full == list(order.batches(4))  # a pure function of (seed, epoch)
    assert full != list(order.batches(5))
    for start in range(len(full) + 1):
        assert list(order.batches(4, start)) == full[start:]
    with pytest.raises(UserError, match="No bucket has enough samples for 4 processes"):
        batch_lib.EpochBatches(6, 2, seed=0, rank=0, world_size=4, random_flip=False, groups=[0, 0, 0, 1, 1, 1])


# ---------------------------------------------------------------------------------------------
# --dataset_name
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def hf_cache(monkeypatch, tmp_path):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    return str(tmp_path / "hf-datasets")


def test_dataset_name_videofolder_paths_and_bytes(tmp_path, clips, hf_cache):
    import datasets

    # A local videofolder (metadata.jsonl beside the clips) read through --dataset_name.
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, None, dataset_name=str(clips))
    data = prepare_data(cfg, family, None, _acc())
    assert [s.key for s in data.samples] == [f"{clips}[{i}]" for i in range(6)]
    reference = prepare_data(_cfg(tmp_path, clips, output_dir=str(tmp_path / "o2")), FakeVideoFamily(), None, _acc())
    assert [s.content_id() for s in data.samples] == [s.content_id() for s in reference.samples]
    assert data.dataset.files == reference.dataset.files  # the same clips hit the same cache entries

    # A string column of paths, relative to the dataset folder; one that leaves it is refused, never opened.
    paths = tmp_path / "paths"
    paths.mkdir()
    rows = [{"file": f"clips/clip_{i:05d}.mp4", "caption": s.caption} for i, s in enumerate(reference.samples[:3])]
    rows += [{"file": f"../{clips.name}/clip_00000.mp4", "caption": "up"},
             {"file": str(tmp_path / clips.name / "clip_00000.mp4"), "caption": "absolute"}]
    shutil.copytree(clips, paths / "clips")
    shutil.copytree(clips, tmp_path / clips.name)
    (paths / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    listed = load_video_dataset(str(paths), video_column="file", caption_column="caption",
                                clip_folder=tmp_path / "clips", cache_dir=hf_cache)
    assert [Path(s.path) for s in listed[:3]] == [paths / "clips" / f"clip_{i:05d}.mp4" for i in range(3)]
    assert [s.refused is None for s in listed] == [True, True, True, False, False]
    assert listed[3].refused.startswith(f"row 3: file '../{clips.name}/clip_00000.mp4' leaves the data folder {paths}")
    quarantine: list[dict] = []
    validate_video_samples(listed, min_frames=1, max_bad_samples_fraction=1.0, log=lambda _: None,
                           quarantine=quarantine, num_workers=1)
    assert [q["key"] for q in quarantine] == [f"{paths}[3]", f"{paths}[4]"]
    assert all("refused, never opened" in q["reason"] for q in quarantine)

    # Clips stored as bytes (parquet with a Video column) are written once, content-addressed, under the cache.
    blobs = [Path(s.path).read_bytes() for s in reference.samples[:2]]
    table = datasets.Dataset.from_dict(
        {"clip": [{"bytes": b, "path": f"c{i}.mp4"} for i, b in enumerate(blobs)],
         "caption": [s.caption for s in reference.samples[:2]]},
        features=datasets.Features({"clip": datasets.Video(decode=False), "caption": datasets.Value("string")}),
    )
    embedded = tmp_path / "embedded"
    (embedded / "data").mkdir(parents=True)
    table.to_parquet(str(embedded / "data" / "train-00000-of-00001.parquet"))
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, None, dataset_name=str(embedded), video_column="clip", caption_column="caption",
               output_dir=str(tmp_path / "o3"))
    data = prepare_data(cfg, family, None, _acc())
    assert family.encoded == [] and data.dataset.files == reference.dataset.files[:2]
    for sample, blob in zip(data.samples, blobs):
        path = Path(sample.path)
        assert path.parent == tmp_path / "cache" / "videos" and path.suffix == ".mp4" and path.read_bytes() == blob
    assert materialise_clip(blobs[0], tmp_path / "cache" / "videos") == Path(data.samples[0].path)

    with pytest.raises(UserError) as err:
        prepare_data(_cfg(tmp_path, None, dataset_name=str(embedded), caption_column="caption"), family, None, _acc())
    text = str(err.value)
    assert "no video column 'video'" in text and "'clip'" in text and "--video_column clip" in text
    with pytest.raises(UserError, match=r"no caption column 'text'.*--caption_column"):
        prepare_data(_cfg(tmp_path, None, dataset_name=str(embedded), video_column="clip"), family, None, _acc())


# ---------------------------------------------------------------------------------------------
# dit-lora check-data
# ---------------------------------------------------------------------------------------------


def _register(request, name: str, cls) -> None:
    """Register ``cls`` as family ``name`` for one test, with the registry's one call, and remove it after."""
    from dit_lora.registry import register_family, unregister_family
    from dit_lora.registry import FamilyEntry

    entry = FamilyEntry(names=(name,), factory=lambda _name: cls())
    register_family(entry)
    request.addfinalizer(lambda: unregister_family(entry))


def test_check_data_decodes_clips_for_the_buckets(tmp_path, bad_clips, monkeypatch, capsys, request):
    _register(request, "fake_video", FakeVideoFamily)
    cfg = _cfg(tmp_path, bad_clips, max_bad_samples_fraction=0.5)
    data = prepare_data(cfg, FakeVideoFamily(), None, _acc())
    data.dataset.files[1].write_bytes(b"torn")

    argv = ["check-data", "--family", "fake_video", "--train_data_dir", str(bad_clips), "--max_num_frames", "9",
            "--height", "48", "--width", "32", "--cache_dir", str(tmp_path / "cache")]
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    out = capsys.readouterr().out
    assert exit_.value.code == 1, out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith(("BLOCK", "WARN"))}
    assert "not a readable video" in rows["corrupt.mp4"] and "truncated" in rows["truncated.mp4"]
    assert "too short (5 frame(s), need at least 9 for --max_num_frames 9)" in rows["short.mp4"]
    assert "file not found" in rows["missing.mp4"]
    assert rows["clip_00000.mp4"].startswith("WARN") and "smaller than its 9x48x32 bucket" in rows["clip_00000.mp4"]
    assert "10 sample(s): 0 ok, 6 warning(s), 4 blocking" in out
    assert "nothing cached yet" in out  # 48 px high is another bucket: no entry of the run above matches

    argv[argv.index("48")] = "32"
    with pytest.raises(SystemExit):
        cli_main(argv + ["--frame_sampling", "uniform"])
    out = capsys.readouterr().out
    torn = [line for line in out.splitlines() if line.startswith("BLOCK") and "clip_00001.mp4" in line]
    assert torn and "cache" in torn[0] and "unreadable" in torn[0]
    assert "10 sample(s): 6 ok, 0 warning(s), 4 blocking; 6 cache entries, 1 bad" in out


def test_check_data_compares_cache_shapes_within_a_bucket(tmp_path, mixed, monkeypatch, capsys, request):
    _register(request, "fake_video", FakeVideoFamily)
    cfg = _cfg(tmp_path, mixed, frame_buckets="9x32x32,5x32x32", max_bad_samples_fraction=0.1)
    prepare_data(cfg, FakeVideoFamily(), None, _acc())
    with pytest.raises(SystemExit) as exit_:
        cli_main(["check-data", "--family", "fake_video", "--train_data_dir", str(mixed), "--frame_buckets",
                  "9x32x32,5x32x32", "--cache_dir", str(tmp_path / "cache"), "--all"])
    out = capsys.readouterr().out
    assert exit_.value.code == 1, out  # the 3-frame clip blocks
    blocked = [line for line in out.splitlines() if line.startswith("BLOCK")]
    assert len(blocked) == 1 and "short_4.mp4" in blocked[0] and "--frame_buckets 9x32x32,5x32x32" in blocked[0]
    assert "shapes differ" not in out
    assert "11 sample(s): 10 ok, 0 warning(s), 1 blocking; 10 cache entries, 0 bad" in out


class FakeCogVideoFamily(FakeVideoFamily):
    """The fake video family under CogVideoX's name: the catalogue gives its text length (226 T5 tokens)."""

    family_name = "cogvideox"


def test_check_data_reports_long_clip_captions_and_duplicate_rows_once(tmp_path, clips, monkeypatch, capsys, request):
    _register(request, "fake_cog", FakeCogVideoFamily)
    root = tmp_path / "data"
    shutil.copytree(clips, root)
    with open(root / "metadata.jsonl", "a") as handle:
        handle.write(json.dumps({"file_name": "clip_00001.mp4", "text": "the same clip again"}) + "\n")
        handle.write(json.dumps({"file_name": "clip_00002.mp4", "text": "word " * 300}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        cli_main(["check-data", "--family", "fake_cog", "--train_data_dir", str(root), "--max_num_frames", "9"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0, out
    assert out.count("duplicates:") == 1 and "clip_00001.mp4 (x2), clip_00002.mp4 (x2)" in out
    assert out.count("long captions:") == 1
    assert ("long captions: 1 of 8 caption(s) exceed the 226-token text length (estimated at 4 characters a token) "
            "and would likely be cut to it; the model never sees the rest: clip_00002.mp4 (1,499 characters") in out


def _still(path: Path, size: tuple[int, int], shade: int) -> bytes:
    Image.new("RGB", size, (shade, 255 - shade, 90)).save(path)
    return path.read_bytes()


@pytest.fixture()
def stills(tmp_path, clips) -> Path:
    """The six 9-frame 32 px clips plus three wide (64x32) and two square images and a corrupt one."""
    root = tmp_path / "stills"
    shutil.copytree(clips, root)
    images = {f"wide_{i}.png": (64, 32) for i in range(3)} | {f"square_{i}.jpg": (40, 40) for i in range(2)}
    for i, (name, size) in enumerate(images.items()):
        _still(root / name, size, 40 * i)
    write_corrupt_clip(root / "corrupt.png")
    with open(root / "metadata.jsonl", "a") as handle:
        for name in [*images, "corrupt.png"]:
            handle.write(json.dumps({"file_name": name, "text": f"a still {name}"}) + "\n")
    return root


def test_images_and_clips_train_in_one_run_in_separate_buckets(tmp_path, stills, capsys):
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, stills, frame_buckets="9x32x32,9x32x64", max_bad_samples_fraction=0.1)
    data = prepare_data(cfg, family, None, _acc())
    out = capsys.readouterr().out
    # The bucket table lists the used buckets, one line each (9x32x64 holds nothing), and the crop count.
    assert "buckets (frames x height x width): 9x32x32, 9x32x64, 1x32x32, 1x32x64\n" in out
    assert ("clips per bucket:\n  9x32x32 (32x32 px, aspect 1.00): 6\n  1x32x32 (32x32 px, aspect 1.00): 2 (images)\n"
            "  1x32x64 (64x32 px, aspect 2.00): 3 (images)\n") in out
    assert "clips cropped by more than 10% to fit their bucket: 0 of 11\n" in out
    assert data.quarantine == [{"key": "corrupt.png",
                                "reason": "not a readable image (corrupt, or not an image despite its extension)"}]
    assert {s.key: s.bucket for s in data.samples if s.is_image} == {
        **{f"wide_{i}.png": (1, 32, 64) for i in range(3)}, **{f"square_{i}.jpg": (1, 32, 32) for i in range(2)}}
    # clips 0 and 2 of the fixture are the same bytes and caption: one cache entry, encoded once
    assert sorted(family.encoded) == sorted([(1, 9, 3, 32, 32)] * 5 + [(1, 1, 3, 32, 64)] * 3 + [(1, 1, 3, 32, 32)] * 2)
    wide = data.samples.index(next(s for s in data.samples if s.key == "wide_0.png"))
    assert data.dataset[(wide, False)]["latents"].shape == (1, 3, 4, 8)  # one latent frame of 32x64 px
    # One group per bucket; a batch never mixes them, so images and clips share the run, never a batch.
    assert len(set(data.groups)) == len({(g, s.bucket) for g, s in zip(data.groups, data.samples)}) == 3
    order = batch_lib.EpochBatches(len(data), 2, seed=1, rank=0, world_size=1, random_flip=False, groups=data.groups)
    for batch in (batch for epoch in range(3) for batch in order.batches(epoch)):
        assert len({data.samples[i].bucket for i, _ in batch}) == 1
        batch_lib.collate([data.dataset[item] for item in batch])  # stacks: one shape per batch

    # A re-run encodes nothing; a changed image (same name and caption) is encoded again, alone.
    for change, encoded in ((None, []), ((64, 32), [(1, 1, 3, 32, 64)])):
        if change:
            _still(stills / "wide_0.png", change, 250)
        family = FakeVideoFamily()
        prepare_data(cfg, family, None, _acc())
        assert family.encoded == encoded


def test_a_dataset_of_only_images_trains_cached_or_not(tmp_path):
    root = tmp_path / "only"
    root.mkdir()
    for i, size in enumerate([(48, 32), (32, 48), (32, 32)]):
        _still(root / f"s{i}.webp", size, 60 * i)
        (root / f"s{i}.txt").write_text(f"still number {i}")
    family = FakeVideoFamily()
    cached = prepare_data(_cfg(tmp_path, root, random_flip=True), family, None, _acc())
    assert [s.bucket for s in cached.samples] == [(1, 32, 32)] * 3 and cached.groups == [1, 1, 1]
    raw = prepare_data(_cfg(tmp_path, root, random_flip=True, cache_latents=False), family, None, _acc())
    for item in ((0, False), (1, True)):
        pixels = raw.dataset[item]["pixel_values"]
        want = family.encode_images(None, pixels[None])["latents"][0]
        assert pixels.shape == (1, 3, 32, 32) and torch.allclose(cached.dataset[item]["latents"], want, atol=1e-6)


class StrictFramesParts(FakeVideoParts):
    """A family whose frame rule refuses one frame (latent frames in pairs, no padding: 5, 13, ...)."""

    def video_buckets(self, cfg):
        return resolution_buckets(cfg.video.frame_buckets or "5x32x32", patch_size_t=2)


class StrictFramesFamily(FakeVideoFamily):
    """The spec of :class:`StrictFramesParts`."""

    parts = StrictFramesParts


def test_a_family_whose_frame_rule_refuses_one_frame_names_the_images(tmp_path, stills, clips):
    with pytest.raises(UserError) as err:
        prepare_data(_cfg(tmp_path, stills), StrictFramesFamily(), None, _acc())
    text = str(err.value)
    assert "holds 6 image(s) (wide_0.png, wide_1.png, wide_2.png, square_0.jpg, square_1.jpg and 1 more)" in text
    assert all(part in text for part in ("in bucket(s) 1x32x32", "does not take a one-frame clip", "patch_size_t=2",
                                         "a clip of 5 frames", "Remove the images from --train_data_dir")), text
    assert len(prepare_data(_cfg(tmp_path, clips), StrictFramesFamily(), None, _acc())) == 6  # clips alone: fine


def test_dataset_name_image_column_rows_are_one_frame_clips(tmp_path, hf_cache):
    import datasets

    blobs = [_still(tmp_path / f"{i}.png", (32, 32), 100 * i) for i in range(2)]
    features = datasets.Features({"picture": datasets.Image(), "text": datasets.Value("string")})
    table = datasets.Dataset.from_dict({"picture": [{"bytes": b} for b in blobs], "text": ["a", "b"]}, features)
    (tmp_path / "ds").mkdir()
    table.to_parquet(str(tmp_path / "ds" / "train.parquet"))
    family = FakeVideoFamily()
    data = prepare_data(_cfg(tmp_path, None, dataset_name=str(tmp_path / "ds"), video_column="picture"), family,
                        None, _acc())
    assert [s.is_image and s.bucket == (1, 32, 32) and Path(s.path).read_bytes() == b
            for s, b in zip(data.samples, blobs)] == [True, True]
    assert family.encoded == [(1, 1, 3, 32, 32)] * 2


def test_check_data_reports_images_and_blocks_a_broken_one(tmp_path, stills, capsys, request):
    _register(request, "fake_video", FakeVideoFamily)
    with pytest.raises(SystemExit) as exit_:
        cli_main(["check-data", "--family", "fake_video", "--train_data_dir", str(stills), "--max_num_frames", "9",
                  "--height", "32", "--width", "32", "--cache_dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert exit_.value.code == 1, out
    assert "checking 12 clip(s) (6 of them images, one-frame clips) for bucket(s) 9x32x32, 1x32x32" in out
    assert [line.split(None, 2)[1] for line in out.splitlines() if line.startswith("BLOCK")] == ["corrupt.png"]
    assert "not a readable image" in out
    # The single (pinned) 32x32 size cuts half of each 64x32 image: counted and warned about, never silent.
    assert "12 sample(s): 8 ok, 3 warning(s), 1 blocking" in out
    assert "the crop into its 1x32x32 bucket cuts 50% of its 64x32 picture" in out
    assert "3 of 11 clip(s) lose more than 10% of their area to the crop" in out


# ---------------------------------------------------------------------------------------------
# kohya N_words/ clip folders: encoded once, quarantined once, one rank per cache entry (issue 33)
# ---------------------------------------------------------------------------------------------


def _kohya_clips(root: Path, *, bad: bool = False) -> Path:
    """``3_clipword/`` with 2 distinct clips (and a corrupt one with ``bad``), captioned by the folder's words."""
    for i, color in enumerate(("red", "blue")):
        write_moving_square_clip(root / "3_clipword" / f"c{i}.mp4", color=color, num_frames=9, size=32)
    if bad:
        write_corrupt_clip(root / "3_clipword" / "broken.mp4")
    return root


def test_kohya_clip_copies_are_encoded_once_and_a_bad_clip_quarantined_once(tmp_path):
    family = FakeVideoFamily()
    cfg = _cfg(tmp_path, _kohya_clips(tmp_path / "data", bad=True), max_bad_samples_fraction=0.4)
    data = prepare_data(cfg, family, None, _acc())
    assert len(data) == 6 and [s.repeat for s in data.samples] == [0, 1, 2, 0, 1, 2]
    assert family.encoded == [(1, 9, 3, 32, 32)] * 2  # one encode per clip, not per copy
    assert len(set(data.dataset.files)) == 2 and data.dataset.files[0] == data.dataset.files[2]
    # 1 bad file of 3 (33%, under 0.4): by copies it would be 3 of 9, the same share, so count lines say which
    assert data.quarantine == [{"key": "3_clipword/broken.mp4", "reason": data.quarantine[0]["reason"], "repeats": 3}]
    with pytest.raises(UserError) as err:
        prepare_data(_cfg(tmp_path, cfg.data.train_data_dir, max_bad_samples_fraction=0.3), FakeVideoFamily(), None, _acc())
    assert "1 of 3 training files (their repeats are not counted) (33.3%)" in str(err.value)


def test_kohya_clip_copies_never_land_on_two_ranks(tmp_path, monkeypatch):
    """Two ranks share the missing entries: each cache file goes to exactly one of them (the copies of one clip on
    two ranks would encode and write one entry twice, at the same time)."""
    import accelerate.utils

    from dit_lora.data import prepare_cache

    monkeypatch.setattr(accelerate.utils, "gather_object", lambda items: list(items))  # a lone stand-in for 2 ranks
    shares: dict[int, set] = {}

    def record(samples, files, todo, **kwargs):
        shares[kwargs["rank"]] = {files[i] for i in todo}
        return {}

    monkeypatch.setattr(prepare_cache, "build_cache", record)
    cfg = _cfg(tmp_path, _kohya_clips(tmp_path / "data"))
    for rank in (0, 1):
        acc = types.SimpleNamespace(is_main_process=rank == 0, process_index=rank, num_processes=2,
                                    wait_for_everyone=lambda: None)
        data = prepare_data(cfg, FakeVideoFamily(), None, acc)
    assert len(data) == 6 and len(shares[0]) == len(shares[1]) == 1
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(data.dataset.files)


def test_video_media_passes_caption_flags_and_refuses_caption_extension_for_datasets(tmp_path):
    root = _kohya_clips(tmp_path / "data")
    for i in range(2):
        (root / "3_clipword" / f"c{i}.caption").write_text(f"clip {i}")
    cfg = _cfg(tmp_path, None, instance_data_dir=str(root), caption_extension=".caption")
    samples = VideoMedia(cfg, FakeVideoFamily(), tmp_path / "cache").list_samples()
    assert [s.caption for s in samples] == ["clip 0"] * 3 + ["clip 1"] * 3
    cfg = _cfg(tmp_path, root, instance_prompt="sks clip")
    assert {s.caption for s in VideoMedia(cfg, FakeVideoFamily(), tmp_path / "cache").list_samples()} == {"sks clip"}
    cfg = _cfg(tmp_path, None, dataset_name=str(tmp_path / "ds"), caption_extension=".caption")
    with pytest.raises(UserError, match="--caption_extension .caption names the caption file beside each clip"):
        VideoMedia(cfg, FakeVideoFamily(), tmp_path / "cache").list_samples()


def test_video_dataset_split_picks_the_split_of_a_save_to_disk_folder(tmp_path, clips, hf_cache):
    import datasets

    shutil.copytree(clips, tmp_path / "saved_src" / "clips")
    rows = {"file": [f"clips/clip_{i:05d}.mp4" for i in range(3)], "caption": ["a", "b", "c"]}
    full = datasets.Dataset.from_dict(rows)
    folder = tmp_path / "saved_src"
    datasets.DatasetDict({"train": full.select([0]), "holdout": full.select([1, 2])}).save_to_disk(str(folder))
    listed = load_video_dataset(str(folder), video_column="file", caption_column="caption",
                                clip_folder=tmp_path / "clip_cache", cache_dir=hf_cache, split="holdout")
    assert [s.caption for s in listed] == ["b", "c"]
    cfg = _cfg(tmp_path, None, dataset_name=str(folder), video_column="file", caption_column="caption",
               dataset_split="holdout")
    assert [s.caption for s in VideoMedia(cfg, FakeVideoFamily(), tmp_path / "cache").list_samples()] == ["b", "c"]


class FakeFpsParts(FakeVideoParts):
    """The fake video family, generating at 16 fps (what Wan2.1 and CogVideoX 1.5 say)."""

    def model_fps(self, model):
        return 16


class FakeFpsFamily(FakeVideoFamily):
    """The spec of :class:`FakeFpsParts`, its frame rate filled."""

    parts = FakeFpsParts
    frame_rate_too = True


@pytest.mark.parametrize("sampling", ["uniform", "first"])
def test_screening_says_the_rate_frame_sampling_takes_frames_at(tmp_path, sampling):
    root = tmp_path / "rates"
    root.mkdir()
    write_moving_square_clip(root / "short.mp4", num_frames=9, size=32, fps=8)  # 9 frames: 1.125 s at 8 fps
    write_moving_square_clip(root / "long.mp4", num_frames=45, size=32, fps=15)  # 45 frames: 3 s at 15 fps
    (root / "metadata.jsonl").write_text("".join(json.dumps({"file_name": n, "text": n}) + "\n"
                                                 for n in ("short.mp4", "long.mp4")))
    family = FakeFpsFamily()
    media = family.data.data_handler(_cfg(tmp_path, root, frame_sampling=sampling), family)
    lines: list[str] = []
    good = media.screen(media.list_samples(), log=lines.append, quarantine=[])
    assert {(s.key, s.source_frames, round(s.source_fps)) for s in good} == {("short.mp4", 9, 8), ("long.mp4", 45, 15)}
    said = [line for line in lines if line.startswith(f"frame sampling {sampling}:")]
    warned = [line for line in lines if "far from the model's 16 fps" in line]
    if sampling == "uniform":  # the long clip's 9 frames spread over all 45: every 5.5th frame, 15 / 5.5 fps
        assert said == [f"frame sampling uniform: the clips' 9 frames span {9 / 8:.1f} to {45 / 15:.1f} s of each "
                        f"clip ({15 / 5.5:.1f} to {8:.1f} frames per second; the model runs at 16 fps); "
                        f"--frame_sampling first takes consecutive frames"]
        assert len(warned) == 1 and warned[0].startswith("warning: 1 clip(s) are sampled at under 8 or over 32")
        assert "long.mp4; --frame_sampling first keeps each clip's own speed" in warned[0]
    else:  # consecutive frames: each clip's own rate, both within half to twice 16 fps
        assert said == [f"frame sampling first: the clips' 9 frames span {9 / 15:.1f} to {9 / 8:.1f} s of each clip "
                        f"({8:.1f} to {15:.1f} frames per second; the model runs at 16 fps); "
                        f"--frame_sampling uniform spreads them over the whole clip"]
        assert warned == []


def test_kohya_clip_copies_are_counted_once_in_the_clip_table(tmp_path):
    family = FakeVideoFamily()
    media = family.data.data_handler(_cfg(tmp_path, _kohya_clips(tmp_path / "data")), family)
    lines: list[str] = []
    good = media.screen(media.list_samples(), log=lines.append, quarantine=[])
    assert len(good) == 6  # 2 clips x 3 repeats still train
    assert "the clip table counts files: 6 samples per epoch with repeats" in lines
    assert "  9x32x32 (32x32 px, aspect 1.00): 2" in lines  # the files, not their 6 copies
    assert "clips cropped by more than 10% to fit their bucket: 0 of 2" in lines
