"""Loss masks on the data path (data/masks.py): found by name and by column (folders, kohya folders, datasets), never
samples themselves, read in any mode, prepared with their image at every aspect ratio (the latent-grid weights line
up with the image's content), cached and reloaded; screened and checked by check-data; refused where they mean
nothing."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from PIL import Image

from dit_lora.commands.cli import main
from dit_lora.config import TrainConfig
from dit_lora.config.applies import check_applies
from dit_lora.core.errors import UserError
from dit_lora.data import masks
from dit_lora.data.aspect import run_buckets
from dit_lora.data.batches import CachedLatentDataset, RawImageDataset
from dit_lora.data.cache import build_cache, cache_files, cache_namespace
from dit_lora.data.preflight import check_samples, summarize
from dit_lora.data.image_media import ImageMedia
from dit_lora.data.sources import load_samples
from dit_lora.data.transforms import crop_seed, preprocess_image
from dit_lora.registry import get_spec


def _save(path, array, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(array), mode).save(path) if mode else Image.fromarray(np.asarray(array)).save(path)
    return path


def _halves(width: int, height: int) -> np.ndarray:
    """A picture whose right half is white, left half black (uint8, (H, W))."""
    out = np.zeros((height, width), np.uint8)
    out[:, width // 2 :] = 255
    return out


def _folder(tmp_path):
    root = tmp_path / "data"
    for name in ("a.png", "b.jpg", "c.png", "2_sks/k.png"):
        _save(root / name, np.full((16, 16, 3), 128, np.uint8))
        (root / name).with_suffix(".txt").write_text(f"caption of {name}")
    _save(root / "a_mask.png", _halves(16, 16))
    _save(root / "b-masklabel.png", _halves(16, 16))  # OneTrainer's name
    _save(root / "2_sks/k_mask.png", _halves(16, 16))  # a kohya repeat folder
    return root


def test_masks_beside_their_images_are_found_and_are_no_samples(tmp_path):
    root, said = _folder(tmp_path), []
    plain = load_samples(train_data_dir=root, log=said.append)
    assert sorted({s.key for s in plain}) == ["2_sks/k.png", "a.png", "b.jpg", "c.png"]  # no mask is a sample
    assert not any(s.has_mask for s in plain)
    assert any("3 mask file(s)" in line and "--masked_loss" in line for line in said)
    found = load_samples(train_data_dir=root, attach_masks=True, log=said.append)
    by_key = {s.key: s for s in found}
    assert by_key["a.png"].mask.endswith("a_mask.png") and by_key["b.jpg"].mask.endswith("b-masklabel.png")
    assert by_key["c.png"].mask is None
    kohya = [s for s in found if s.key == "2_sks/k.png"]
    assert len(kohya) == 2 and all(s.mask.endswith("k_mask.png") for s in kohya)  # every repeat keeps its mask
    with pytest.raises(UserError) as err:
        masks.require_masks(found, column="mask", folder=str(root), dataset=None)
    text = str(err.value)
    assert "1 of 4 image(s) have none: c.png" in text and "<name>_mask.png" in text and "`mask` column" in text


def test_a_metadata_column_names_the_mask_and_wins_over_the_file_beside(tmp_path):
    root = tmp_path / "data"
    _save(root / "a.png", np.zeros((8, 8, 3), np.uint8))
    _save(root / "a_mask.png", np.zeros((8, 8), np.uint8))
    _save(root / "masks/a.png", _halves(8, 8))
    rows = [{"file_name": "a.png", "text": "a", "mask": "masks/a.png"}]
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = load_samples(train_data_dir=root, attach_masks=True)
    assert [s.key for s in samples] == ["a.png"] and samples[0].mask.endswith("masks/a.png")
    (root / "masks/a.png").unlink()  # named by no row now, it would be an image of its own
    (root / "metadata.jsonl").write_text(json.dumps({**rows[0], "mask": "../outside.png"}) + "\n")
    with pytest.raises(UserError, match="mask of `a.png` is refused"):
        load_samples(train_data_dir=root, attach_masks=True)
    (root / "metadata.jsonl").write_bytes(b'{"file_name": "a.png", "text": "\xff"}\n')
    with pytest.raises(UserError, match="not valid UTF-8"):  # the caption reader's paragraph, not the mask reader's
        load_samples(train_data_dir=root, attach_masks=True)


def test_a_dataset_column_holds_the_masks(tmp_path):
    root = tmp_path / "ds"
    _save(root / "a.png", np.zeros((8, 8, 3), np.uint8))
    _save(root / "a_m.png", _halves(8, 8))
    (root / "train.jsonl").write_text(json.dumps({"image": "a.png", "text": "a", "mask": "a_m.png"}) + "\n")
    samples = load_samples(dataset_name=str(root / "train.jsonl"), attach_masks=True)
    assert samples[0].has_mask and masks.read_mask(samples[0].mask_source()).values[0].tolist() == [0] * 4 + [1] * 4
    unmasked = load_samples(dataset_name=str(root / "train.jsonl"))
    assert not unmasked[0].has_mask
    assert samples[0].content_id() != unmasked[0].content_id()  # the mask is part of the cache entry's name


@pytest.mark.parametrize(
    "mode, make, expected, note",
    [
        ("L", lambda: np.array([[0, 51, 255]], np.uint8), [0.0, 0.2, 1.0], None),
        ("1", lambda: np.array([[False, True, True]]), [0.0, 1.0, 1.0], None),
        ("RGB", lambda: np.repeat(np.array([[[0], [51], [255]]], np.uint8), 3, -1), [0.0, 0.2, 1.0], None),
        ("RGBA", lambda: np.array([[[255, 255, 255, 0], [255, 255, 255, 51], [51, 51, 51, 255]]], np.uint8),
         [0.0, 0.2, 0.2], None),  # luminance times alpha: transparent is black
        ("I;16", lambda: np.array([[0, 13107, 65535]], np.uint16), [0.0, 0.2, 1.0], None),
        ("RGB", lambda: np.array([[[255, 0, 0], [0, 0, 0], [255, 255, 255]]], np.uint8), [0.299, 0.0, 1.0],
         "coloured"),
    ],
)
def test_every_mode_reads_as_a_weight(tmp_path, mode, make, expected, note):
    path = tmp_path / "m.png"
    Image.fromarray(make()).save(path)
    read = masks.read_mask(str(path))
    assert np.allclose(read.values[0], expected, atol=0.003), read.values
    assert (note is None) == (not read.notes) and (note is None or note in read.notes[0])


@pytest.mark.parametrize("size", [(200, 50), (50, 200), (96, 64), (64, 64)])
@pytest.mark.parametrize("center_crop, flip", [(True, False), (False, True)])
def test_the_mask_follows_its_image_into_its_bucket_and_onto_the_latent_grid(tmp_path, size, center_crop, flip):
    width, height = size
    content = _halves(width, height)  # the image is its own mask: where it is white, the mask is white
    image = Image.fromarray(np.repeat(content[..., None], 3, -1))
    bucket = min(run_buckets("auto", 64, 16), key=lambda b: abs(np.log(b[0] / b[1]) - np.log(height / width)))
    seed = crop_seed(0, "x.png")
    pixels = preprocess_image(image, bucket, center_crop=center_crop, flip=flip, crop_rng_seed=seed)
    for mask_size in ((width, height), (width // 2, height // 2)):  # at the image's size, and half of it (resized)
        values = np.asarray(Image.fromarray(content).resize(mask_size, Image.Resampling.BILINEAR), np.float32) / 255
        mask = masks.preprocess_mask(values, (width, height), bucket, center_crop=center_crop, flip=flip,
                                     crop_rng_seed=seed)
        assert mask.shape == (1, *bucket)
        grid = masks.latent_mask(mask[None], (bucket[0] // 8, bucket[1] // 8))[0, 0]
        content_grid = masks.latent_mask(((pixels[:1] + 1) / 2)[None], grid.shape)[0, 0]
        tolerance = 0.01 if mask_size == (width, height) else 0.1  # a half-size mask's edge blurs a little
        assert torch.allclose(grid, content_grid, atol=tolerance), (grid, content_grid)
        assert grid.min() < 0.05 and grid.max() > 0.95  # both halves are on the grid: it is no uniform weight


def _masked_folder(tmp_path, sizes):
    root = tmp_path / "data"
    for i, (width, height) in enumerate(sizes):
        picture = np.repeat(_halves(width, height)[..., None], 3, -1)
        _save(root / f"{i}.png", picture)
        _save(root / f"{i}_mask.png", _halves(width, height))
        (root / f"{i}.txt").write_text(f"image {i}")
    return root


def _media(root, **options):
    cfg = TrainConfig.for_family(
        "sana", train_data_dir=str(root), masked_loss=True, resolution=64, seed=0, pretrained_model_name_or_path="m",
        **options,
    )
    return ImageMedia(cfg, get_spec("sana"))


def test_masks_are_cached_with_their_latents_and_reloaded_flipped_alike(tmp_path):
    root = _masked_folder(tmp_path, [(128, 64), (64, 128), (64, 64)])
    media, said, quarantine = _media(root, random_flip=True), [], []
    samples = media.screen(media.list_samples(), log=said.append, quarantine=quarantine)
    assert quarantine == [] and any("masks (--masked_loss): 3 used, 0 left out" in line for line in said)
    files = cache_files(tmp_path / "cache", "ns", samples)

    def encode_images(pixels):  # a stand-in VAE: 8x8 blocks averaged, the luminance kept as channel 0
        return torch.nn.functional.avg_pool2d((pixels + 1) / 2, 8)

    failed = build_cache(
        samples, files, list(range(len(samples))), encode_images=encode_images,
        encode_prompts=lambda caps: {"prompt_embeds": torch.zeros(len(caps), 2, 4)},
        load_pixels=media.pixel_loader(samples), random_flip=True, batch_size=2, log=said.append,
    )
    assert failed == {}
    dataset = CachedLatentDataset(files)
    for index, sample in enumerate(samples):
        for flip in (False, True):
            item = dataset[(index, flip)]
            assert item["loss_mask"].shape == (1, sample.bucket[0] // 8, sample.bucket[1] // 8)
            assert torch.allclose(item["loss_mask"][0], item["latents"][0], atol=0.01)  # lined up with the content
    # the identity of the cache changes when masking is switched on, and an entry's name when its mask changes
    plain_cfg = TrainConfig.for_family("sana", train_data_dir=str(root), resolution=64, pretrained_model_name_or_path="m")
    plain = ImageMedia(plain_cfg, get_spec("sana"))
    assert cache_namespace(media.namespace_identity()) != cache_namespace(plain.namespace_identity())
    before = samples[0].cache_key()
    _save(root / "0_mask.png", np.full((64, 128), 255, np.uint8))
    assert samples[0].cache_key() != before


def test_an_uncached_batch_carries_the_mask_to_the_latent_grid(tmp_path):
    from dit_lora.kit.components import encoded_batch

    root = _masked_folder(tmp_path, [(64, 64)])
    media = _media(root)
    samples = media.screen(media.list_samples(), log=lambda _: None, quarantine=[])
    item = RawImageDataset(samples, 64, False, 0, masked=True)[(0, True)]
    assert item["mask_pixels"].shape == (1, 64, 64) and item["mask_pixels"][0, 0, 0] == 1.0  # flipped: white left

    class Encoders:
        def encode_prompts(self, comps, captions):
            return {"prompt_embeds": torch.zeros(len(captions), 2, 4)}

        def encode_images(self, comps, pixels):
            return torch.zeros(pixels.shape[0], 4, pixels.shape[-2] // 8, pixels.shape[-1] // 8)

    batch = {k: (v[None] if isinstance(v, torch.Tensor) else [v]) for k, v in item.items()}
    out = encoded_batch(Encoders(), None, batch, "cpu", cached=False)
    assert out["loss_mask"].shape == (1, 1, 8, 8) and out["loss_mask"][0, 0, :, :4].eq(1).all()


def _checked_folder(tmp_path):
    root = tmp_path / "data"
    cases = {
        "ok": _halves(32, 32),
        "black": np.zeros((32, 32), np.uint8),
        "white": np.full((32, 32), 255, np.uint8),
        "small": _halves(16, 16),  # same shape, half the size: resized
        "wide": _halves(64, 16),  # another aspect ratio: would not line up
    }
    for name, mask in cases.items():
        _save(root / f"{name}.png", np.zeros((32, 32, 3), np.uint8))
        (root / f"{name}.txt").write_text(name)
        _save(root / f"{name}_mask.png", mask)
    _save(root / "coloured.png", np.zeros((32, 32, 3), np.uint8))
    (root / "coloured.txt").write_text("coloured")
    colour = np.zeros((32, 32, 3), np.uint8)
    colour[:, 16:, 0] = 255
    _save(root / "coloured_mask.png", colour)
    _save(root / "broken.png", np.zeros((32, 32, 3), np.uint8))
    (root / "broken.txt").write_text("broken")
    (root / "broken_mask.png").write_bytes(b"not a png")
    return root


def test_check_data_and_screening_check_every_mask(tmp_path, capsys):
    root = _checked_folder(tmp_path)
    samples = load_samples(train_data_dir=root, attach_masks=True)
    rows = {r.key: r for r in check_samples(samples, resolution=32, num_workers=1)}
    assert rows["ok.png"].status == "ok" and rows["ok.png"].mask == "ok"
    assert rows["black.png"].status == "block" and "all black: the sample would train nothing" in rows["black.png"].problem
    assert rows["white.png"].mask == "white" and "all white: the whole image trains (no masking)" in rows["white.png"].problem
    assert rows["small.png"].status == "warn" and "16x16: resized to its image's 32x32" in rows["small.png"].problem
    assert rows["wide.png"].status == "block" and "not of its image's shape" in rows["wide.png"].problem
    assert rows["coloured.png"].status == "warn" and "its luminance is the weight" in rows["coloured.png"].problem
    assert rows["broken.png"].status == "block" and "cannot be read" in rows["broken.png"].problem
    line = summarize(list(rows.values())).splitlines()[0]
    assert "7 mask(s): 1 all white (no masking), 2 with a warning, 3 blocking" in line
    # a black area that trains at --unmasked_weight is no block
    weighted = check_samples([s for s in samples if s.key == "black.png"], resolution=32, unmasked_weight=0.1)
    assert weighted[0].status == "warn" and "--unmasked_weight 0.1" in weighted[0].problem
    # training screens them alike: the blocks are quarantined, one line counts the rest
    said, quarantine = [], []
    kept = masks.screen_masks(samples, unmasked_weight=0.0, max_pixels=None, log=said.append, quarantine=quarantine)
    assert sorted(q["key"] for q in quarantine) == ["black.png", "broken.png", "wide.png"]
    assert [s.index for s in kept] == list(range(4))
    assert "4 used, 3 left out; 1 all white (no masking), 1 resized to their image's size, 1 coloured" in said[-1]
    # and the command: `dit-lora check-data --masked_loss true`
    with pytest.raises(SystemExit) as done:
        main(["check-data", "--family", "sana", "--train_data_dir", str(root), "--resolution", "32",
              "--masked_loss", "true"])
    out = capsys.readouterr().out
    assert done.value.code == 1 and "7 mask(s)" in out and "broken_mask.png cannot be read" in out


def test_the_mask_options_are_refused_where_they_mean_nothing():
    for family in ("wan", "cogvideox", "qwen2_5_vl"):
        cfg = dataclasses.replace(TrainConfig.for_family(family, masked_loss=True), explicit=frozenset({"masked_loss"}))
        with pytest.raises(UserError) as err:
            check_applies(cfg.model.family, cfg.explicit)
        assert "--masked_loss is an option of image families" in str(err.value)
        assert "clips and video LLMs train unmasked" in str(err.value)
    for family in ("sana", "dit", "qwenimage", "qwenimage_edit_plus", "zimage", "flux2"):
        cfg = TrainConfig.for_family(family, masked_loss=True)
        check_applies(cfg.model.family, frozenset({"masked_loss"}))
    lone = dataclasses.replace(TrainConfig.for_family("sana", unmasked_weight=0.1), explicit=frozenset({"unmasked_weight"}))
    with pytest.raises(UserError, match="--unmasked_weight shapes the masked loss, but --masked_loss is off"):
        masks.check_options(lone.data, lone.explicit)
    column = dataclasses.replace(TrainConfig.for_family("sana", mask_column="m"), explicit=frozenset({"mask_column"}))
    with pytest.raises(UserError, match="--mask_column shapes the masked loss, but --masked_loss is off"):
        masks.check_options(column.data, column.explicit)
    both = TrainConfig.for_family("sana", unmasked_weight=0.1, masked_loss=True)
    masks.check_options(both.data, frozenset({"unmasked_weight", "masked_loss"}))


def test_check_data_lists_an_image_without_a_mask_beside_the_other_mask_problems(tmp_path, capsys):
    """`check-data --masked_loss` gives an image without a mask a BLOCK row (a run refuses it before screening) and
    still reports every other mask; the held-out split counts only the usable images and names them."""
    from PIL import Image

    root = _checked_folder(tmp_path)
    Image.new("RGB", (32, 32), (200, 10, 10)).save(root / "bare.png")  # no bare_mask.png
    (root / "bare.txt").write_text("a bare image")
    with pytest.raises(SystemExit) as done:
        main(["check-data", "--family", "sana", "--train_data_dir", str(root), "--resolution", "32",
              "--masked_loss", "true", "--validation_split", "0.25"])
    out = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 1 and "bare.png" in out and "no mask (--masked_loss; looked for" in out
    assert "broken_mask.png cannot be read" in out and "all black" in out  # the other masks are still checked
    assert "of 4 usable sample(s) held out" in out and "held out: " in out  # 8 images, 4 blocked
