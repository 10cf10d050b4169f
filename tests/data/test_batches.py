"""data/batches.py: the rank-sharded, resumable batch order and the datasets the loop reads.

The grouped (bucketed) order and its bit-for-bit agreement with the order before groups existed are pinned in
tests/data/test_video_prepare.py (``test_ungrouped_order_is_unchanged_and_grouped_order_resumes``).
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from dit_lora.data import RawSample
from dit_lora.data.batches import (
    CachedLatentDataset,
    EpochBatches,
    RawImageDataset,
    collate,
    epoch_loader,
)
from dit_lora.core.errors import UserError


def test_ranks_split_each_epoch_without_overlap_and_drop_the_uneven_tail():
    orders = [EpochBatches(11, 2, seed=1, rank=r, world_size=2, random_flip=False) for r in range(2)]
    assert [len(o) for o in orders] == [3, 3]  # 5 samples per rank, batches of 2
    seen = [i for o in orders for batch in o.batches(0) for i, _ in batch]
    assert len(seen) == len(set(seen)) == 10  # one sample is left out this epoch
    assert all(not flip for o in orders for batch in o.batches(0) for _, flip in batch)
    assert list(orders[0].batches(0)) == list(orders[0].batches(0))
    assert list(orders[0].batches(0)) != list(orders[0].batches(1))  # reshuffled each epoch


def test_resuming_mid_epoch_gives_the_remaining_batches_and_flips_are_per_sample():
    order = EpochBatches(20, 3, seed=7, rank=0, world_size=1, random_flip=True)
    full = list(order.batches(2))
    assert list(order.batches(2, start=4)) == full[4:]
    flips = [flip for batch in full for _, flip in batch]
    assert 0 < sum(flips) < len(flips)


def test_too_few_samples_for_the_processes_and_mismatched_groups_are_refused():
    with pytest.raises(UserError, match="3 usable samples but 4 processes"):
        EpochBatches(3, 1, seed=0, rank=0, world_size=4, random_flip=False)
    with pytest.raises(ValueError, match="groups has 2 entries for 3 samples"):
        EpochBatches(3, 1, seed=0, rank=0, world_size=1, random_flip=False, groups=[0, 1])
    assert EpochBatches(4, 2, seed=0, rank=0, world_size=1, random_flip=False, groups=[5] * 4).groups is None


def test_cached_dataset_swaps_in_the_flipped_entries(tmp_path):
    file = tmp_path / "0.safetensors"
    save_file({"latents": torch.zeros(2), "latents_flipped": torch.ones(2), "image_latents": torch.zeros(1),
               "image_latents_flipped": torch.ones(1), "prompt_embeds": torch.full((3,), 5.0)}, str(file))
    data = CachedLatentDataset([file])
    plain, flipped = data[(0, False)], data[(0, True)]
    assert sorted(plain) == ["image_latents", "latents", "prompt_embeds", "sample_index"]
    assert plain["latents"].sum() == 0 and flipped["latents"].sum() == 2 and flipped["image_latents"].sum() == 1
    assert torch.equal(plain["prompt_embeds"], flipped["prompt_embeds"]) and flipped["sample_index"] == 0
    save_file({"latents": torch.zeros(2)}, str(tmp_path / "1.safetensors"))
    with pytest.raises(KeyError, match="no flipped latents"):
        CachedLatentDataset([tmp_path / "1.safetensors"])[(0, True)]


def test_raw_image_dataset_preprocesses_and_flips(tmp_path):
    from PIL import Image

    image = Image.new("RGB", (16, 16), (255, 0, 0))
    image.paste((0, 0, 255), (0, 0, 8, 16))  # blue left half
    image.save(tmp_path / "a.png")
    data = RawImageDataset([RawSample(key="a.png", caption="red", path=str(tmp_path / "a.png"))], 8,
                           center_crop=True, seed=0)
    plain, flipped = data[(0, False)], data[(0, True)]
    assert flipped["pixel_values"].shape == (3, 8, 8) and flipped["caption"] == "red" and flipped["sample_index"] == 0
    assert plain["pixel_values"][2, 0, 0] == 1.0 and plain["pixel_values"][0, 0, 0] == -1.0  # blue on the left
    assert torch.equal(flipped["pixel_values"], plain["pixel_values"].flip(-1))


def test_raw_image_dataset_decodes_each_image_to_its_bucket(tmp_path):
    from PIL import Image

    Image.new("RGB", (64, 16), (255, 0, 0)).save(tmp_path / "wide.png")
    path = str(tmp_path / "wide.png")
    samples = [RawSample(key="wide.png", caption="red", path=path, bucket=(8, 32)),
               RawSample(key="wide.png", caption="red", path=path)]
    data = RawImageDataset(samples, 16, center_crop=True, seed=0)
    assert data[(0, False)]["pixel_values"].shape == (3, 8, 32)
    assert data[(1, False)]["pixel_values"].shape == (3, 16, 16)  # no bucket yet: the --resolution square


def test_collate_stacks_tensors_and_lists_the_rest():
    out = collate([{"x": torch.zeros(2), "caption": "a", "sample_index": 0},
                   {"x": torch.ones(2), "caption": "b", "sample_index": 1}])
    assert out["x"].shape == (2, 2) and out["caption"] == ["a", "b"] and out["sample_index"] == [0, 1]


def test_epoch_loader_starts_at_the_batch_and_leaves_the_global_rng_alone():
    class Items(torch.utils.data.Dataset):
        def __getitem__(self, item):
            return {"index": torch.tensor(item[0])}

        def __len__(self):
            return 6

    order = EpochBatches(6, 2, seed=3, rank=0, world_size=1, random_flip=False)
    state = torch.random.get_rng_state()
    loaded = [b["index"].tolist() for b in epoch_loader(Items(), collate, order, 1, 1, 0)]
    assert torch.equal(torch.random.get_rng_state(), state)
    assert loaded == [[i for i, _ in batch] for batch in list(order.batches(1))[1:]]


def test_raw_video_dataset_gives_an_image_as_a_flippable_one_frame_clip(tmp_path):
    from PIL import Image

    from dit_lora.data.batches import CLIP_FPS, RawVideoDataset
    from dit_lora.data.video import VideoSample

    pixels = torch.arange(24 * 40 * 3, dtype=torch.int64).reshape(24, 40, 3) % 251
    Image.fromarray(pixels.to(torch.uint8).numpy()).save(tmp_path / "a.png")
    sample = VideoSample(key="a.png", caption="a still", path=str(tmp_path / "a.png"), bucket=(1, 16, 16))
    dataset = RawVideoDataset([sample], "uniform", max_pixels=24 * 40)
    plain, flipped = dataset[(0, False)], dataset[(0, True)]
    assert plain["pixel_values"].shape == (1, 3, 16, 16) and plain["caption"] == "a still"
    assert torch.equal(flipped["pixel_values"], plain["pixel_values"].flip(-1))
    assert plain[CLIP_FPS].item() == 0.0  # an image: no frame rate (a clip carries its own: tests/families/ltx2)
    assert not torch.equal(flipped["pixel_values"], plain["pixel_values"])
    with pytest.raises(ValueError, match="beyond"):  # the budget is the run's, not the decoder's default
        RawVideoDataset([sample], "uniform", max_pixels=24 * 40 - 1)[(0, False)]


def test_the_largest_batch_is_the_flag_or_the_data_per_process_when_smaller():
    """--train_batch_size 64 on 4 images trains at batch 4: what the log, summary and card must say."""
    kw = dict(seed=0, rank=0, random_flip=False)
    assert EpochBatches(4, 64, world_size=1, **kw).largest_batch == 4
    assert max(len(b) for b in EpochBatches(4, 64, world_size=1, **kw).batches(0)) == 4
    assert EpochBatches(9, 64, world_size=2, **kw).largest_batch == 4  # 4 per process, one left out
    assert EpochBatches(100, 8, world_size=2, **kw).largest_batch == 8
    grouped = EpochBatches(7, 64, world_size=1, groups=[0, 0, 0, 1, 1, 1, 1], **kw)
    assert grouped.largest_batch == 4 == max(len(b) for b in grouped.batches(0))  # the largest bucket


# ---- prior preservation: every batch paired with class images -----------------------------------------------------
def _paired(world=1, rank=0, class_groups=None):
    from dit_lora.data.batches import paired_order

    order = EpochBatches(10, 2, seed=5, rank=rank, world_size=world, random_flip=True)
    return paired_order(order, class_groups, 6, offset=10)


def test_each_batch_is_followed_by_its_class_images_in_a_seeded_resumable_pairing():
    paired = _paired()
    assert len(paired) == len(paired.order) == 5 and paired.largest_batch == 2 and paired.seed == 5
    epochs = [list(paired.batches(e)) for e in range(3)]
    for epoch in epochs:
        for items in epoch:
            own, prior = items[:2], items[2:]
            assert all(i < 10 for i, *_ in own) and len(prior) == 2 and all(10 <= i < 16 for i, _ in prior)
    # the class order runs on over the instance epochs: 6 class images give 3 batches, every class image is used
    # once in each run of 3 instance batches
    flat = [items[2:] for epoch in epochs for items in epoch]
    for start in range(0, 15, 3):
        assert sorted(i for batch in flat[start : start + 3] for i, _ in batch) == list(range(10, 16))
    assert list(_paired().batches(1, start=3)) == epochs[1][3:]  # a resume pairs as the whole run did
    assert list(_paired().batches(2)) == epochs[2]


def test_class_batches_keep_to_one_bucket_and_ranks_split_them():
    groups = [0, 0, 0, 1, 1, 1]
    for items in _paired(class_groups=groups).batches(0):
        assert len({groups[i - 10] for i, _ in items[2:]}) == 1
    a, b = (list(_paired(world=2, rank=r).batches(0)) for r in range(2))
    for x, y in zip(a, b):
        assert not {i for i, _ in x[1:]} & {i for i, _ in y[1:]}  # one own image and one class image each


def test_a_paired_batch_is_collated_apart():
    from dit_lora.data.batches import PRIOR, PriorCollate

    items = [{"sample_index": i, "x": torch.full((2,), float(i))} for i in (0, 3, 10, 12)]
    batch = PriorCollate(collate, start=10)(items)
    assert batch["sample_index"] == [0, 3] and batch["x"][:, 0].tolist() == [0.0, 3.0]
    assert batch[PRIOR]["sample_index"] == [10, 12] and batch[PRIOR]["x"][:, 0].tolist() == [10.0, 12.0]
    assert PRIOR not in PriorCollate(collate, start=10)(items[:2])
