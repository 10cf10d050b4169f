"""data/caption_dropout.py: the per-(seed, epoch, sample) drop, the empty caption's cache entry and its use."""

from __future__ import annotations

import dataclasses

import types

import pytest
import torch
from safetensors.torch import load_file

from dit_lora.config import TrainConfig
from dit_lora.config.applies import check_applies
from dit_lora.data import batches as batch_lib
from dit_lora.data.caption_dropout import (EMPTY_PROMPT_FILE, drop_caption, empty_prompt_problem, ensure_empty_prompt,
                                           start_line)
from dit_lora.data.prepare import prepare_data
from dit_lora.core.errors import UserError
from dit_lora.kit import components as base
from data_files import make_image, write_jsonl
from diffusion_stand_ins import stand_in_spec


def test_the_dropped_share_is_the_probability_and_the_drop_is_a_pure_function():
    pairs = [(epoch, index) for epoch in range(40) for index in range(500)]  # 20000 draws: sd of the share 0.002
    for p in (0.1, 0.5):
        share = sum(drop_caption(7, e, i, p) for e, i in pairs) / len(pairs)
        assert abs(share - p) < 0.01, (p, share)
    assert not any(drop_caption(7, e, i, 0.0) for e, i in pairs)
    first = [drop_caption(7, e, i, 0.1) for e, i in pairs[:2000]]
    assert first == [drop_caption(7, e, i, 0.1) for e, i in pairs[:2000]]  # same (seed, epoch, index): same answer
    assert first != [drop_caption(8, e, i, 0.1) for e, i in pairs[:2000]]  # another seed: other samples
    assert first != [drop_caption(7, e + 1, i, 0.1) for e, i in pairs[:2000]]  # another epoch: other samples
    # a larger probability drops a superset (one hash per draw, compared with p)
    assert all(drop_caption(7, e, i, 0.5) for e, i in pairs[:2000] if drop_caption(7, e, i, 0.1))
    assert start_line(0.1) == ("caption dropout: each step drops a sample's caption with probability 0.1 "
                               "(deterministic per seed, epoch and sample)")


def test_batches_carry_the_drop_only_when_it_is_on_and_a_resume_sees_the_same():
    plain = batch_lib.EpochBatches(40, 4, seed=3, rank=0, world_size=1, random_flip=True)
    on = batch_lib.EpochBatches(40, 4, seed=3, rank=0, world_size=1, random_flip=True, caption_dropout=0.5)
    for epoch in (0, 1):
        without, with_drop = list(plain.batches(epoch)), list(on.batches(epoch))
        assert all(len(item) == 2 for batch in without for item in batch)  # the order recorded before: unchanged
        assert [[(i, f) for i, f, _ in batch] for batch in with_drop] == without
        drops = [d for batch in with_drop for i, _, d in batch]
        assert drops == [drop_caption(3, epoch, i, 0.5) for batch in with_drop for i, _, _ in batch]
        assert 0 < sum(drops) < len(drops)
        assert list(on.batches(epoch, start=3)) == with_drop[3:]
    assert batch_lib.unpack_item((5, True)) == (5, True, False)
    assert batch_lib.unpack_item((5, False, True)) == (5, False, True)


class CountingEncoders(base.DiffusionEncoders):
    """Latents are 8x pooled pixels; a caption's embedding is (its length, 1) with a mask; records every caption
    list it encodes."""

    def __init__(self) -> None:
        self.prompts: list[list[str]] = []

    def cache_identity(self, cfg, comps=None):
        return {"model": "counting"}

    def encode_images(self, comps, pixel_values):
        return torch.nn.functional.avg_pool2d(pixel_values, 8)

    def encode_prompts(self, comps, captions, *, with_negative=False):
        self.prompts.append(list(captions))
        embeds = torch.tensor([[float(len(c)), 1.0] for c in captions])
        return {"prompt_embeds": embeds, "prompt_attention_mask": torch.ones(len(captions), 3, dtype=torch.long)}


def counting_prompts():
    """The stand-in family: CountingEncoders (``spec.encoders.prompts``), squares only."""
    return stand_in_spec("counting_prompts", CountingEncoders())


def _accelerator():
    return types.SimpleNamespace(is_main_process=True, process_index=0, num_processes=1, wait_for_everyone=lambda: None)


@pytest.fixture
def images(tmp_path):
    rows = []
    for i in range(6):
        make_image(tmp_path / "data" / f"{i}.png", size=(16, 16), color=(40 * i, 0, 0))
        rows.append({"file_name": f"{i}.png", "text": "x" * (i + 1)})
    write_jsonl(tmp_path / "data" / "metadata.jsonl", rows)
    return tmp_path / "data"


def _config(tmp_path, data, **kw):
    values = dict(train_data_dir=str(data), output_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"),
                  resolution=16, train_batch_size=2, seed=0, center_crop=True, caption_dropout_probability=0.5)
    values.update(kw)
    return TrainConfig(**values)


def _dropped_and_kept(order, epochs=range(4)):
    items = [item for epoch in epochs for batch in order.batches(epoch) for item in batch]
    return [it for it in items if it[2]], [it for it in items if not it[2]]


def test_the_empty_caption_is_encoded_once_into_the_cache_and_reused(tmp_path, images, capsys):
    family, cfg = counting_prompts(), _config(tmp_path, images)
    data = prepare_data(cfg, family, None, _accelerator())
    assert family.encoders.prompts.count([""]) == 1 and sum(p == [""] for p in family.encoders.prompts) == 1
    (entry,) = (tmp_path / "cache").glob(f"*/{EMPTY_PROMPT_FILE}")
    assert data.dataset.empty_prompt == entry and empty_prompt_problem(entry) is None
    log = capsys.readouterr().out
    assert start_line(0.5) in log and f"the empty caption encoded once into {entry}" in log

    order = batch_lib.EpochBatches(len(data), 2, seed=0, rank=0, world_size=1, random_flip=False, caption_dropout=0.5)
    dropped, kept = _dropped_and_kept(order)
    assert dropped and kept
    for item in dropped:
        got = data.dataset[item]
        assert got["prompt_embeds"].tolist() == [0.0, 1.0] and got["prompt_attention_mask"].tolist() == [1, 1, 1]
        assert torch.equal(got["latents"], data.dataset[(item[0], False)]["latents"])  # only the caption changes
    for item in kept:
        caption = data.samples[item[0]].caption
        assert data.dataset[item]["prompt_embeds"].tolist() == [float(len(caption)), 1.0]

    again = counting_prompts()  # a second run on the same cache encodes nothing: no caption, no empty caption
    prepare_data(cfg, again, None, _accelerator())
    assert again.encoders.prompts == []
    entry.write_bytes(b"not safetensors")  # a damaged entry is said and encoded again
    third = counting_prompts()
    prepare_data(cfg, third, None, _accelerator())
    assert third.encoders.prompts == [[""]] and empty_prompt_problem(entry) is None
    assert "is unreadable" in capsys.readouterr().out


def test_without_dropout_nothing_is_encoded_for_the_empty_caption(tmp_path, images):
    family = counting_prompts()
    data = prepare_data(_config(tmp_path, images, caption_dropout_probability=0.0), family, None, _accelerator())
    assert [""] not in family.encoders.prompts and data.dataset.empty_prompt is None
    assert not list((tmp_path / "cache").glob(f"*/{EMPTY_PROMPT_FILE}"))


def test_a_non_finite_empty_caption_is_one_paragraph(tmp_path):
    def nan_prompts(captions):
        return {"prompt_embeds": torch.full((len(captions), 2), float("nan"))}

    with pytest.raises(UserError, match="encoding of the empty caption is not finite"):
        ensure_empty_prompt(tmp_path / EMPTY_PROMPT_FILE, nan_prompts, print)
    assert not (tmp_path / EMPTY_PROMPT_FILE).exists()


def test_uncached_runs_encode_the_empty_caption_for_a_dropped_sample(tmp_path, images):
    family = counting_prompts()
    cfg = _config(tmp_path, images, cache_latents=False)
    data = prepare_data(cfg, family, None, _accelerator())
    assert not data.cached and family.encoders.prompts == []
    order = batch_lib.EpochBatches(len(data), 2, seed=0, rank=0, world_size=1, random_flip=False, caption_dropout=0.5)
    dropped, kept = _dropped_and_kept(order)
    assert {data.dataset[item]["caption"] for item in dropped} == {""}
    assert all(data.dataset[item]["caption"] == data.samples[item[0]].caption != "" for item in kept)
    batch = data.collate([data.dataset[item] for item in dropped[:1] + kept[:1]])
    family.loss.prepare_batch(None, batch, torch.device("cpu"), cached=False)  # the per-step encode sees ""
    assert family.encoders.prompts[-1] == ["", data.samples[kept[0][0]].caption]


def test_sana_dropped_samples_get_the_cached_empty_caption_which_is_its_own_encoding(tmp_path, tiny_sana,
                                                                                      shapes_data):
    from dit_lora.registry import get_family

    family = get_family("sana")
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tiny_sana), train_data_dir=str(shapes_data),
                                 output_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"), resolution=64,
                                 center_crop=True, seed=0, caption_dropout_probability=0.5)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    family.setup.configure(comps, cfg)
    data = prepare_data(cfg, family, comps, _accelerator())
    own = family.encoders.encode_prompts(comps, [""])
    entry = load_file(str(data.dataset.empty_prompt))
    assert set(entry) == set(own) == {"prompt_embeds", "prompt_attention_mask"}
    for key in own:
        assert torch.equal(entry[key], own[key][0]), key
    order = batch_lib.EpochBatches(len(data), 2, seed=0, rank=0, world_size=1, random_flip=False, caption_dropout=0.5)
    dropped, kept = _dropped_and_kept(order)
    assert dropped and kept
    for item in dropped[:3]:
        got = data.dataset[item]
        for key in own:
            assert torch.equal(got[key], own[key][0]), key
    caption = data.samples[kept[0][0]].caption
    assert not torch.equal(data.dataset[kept[0]]["prompt_embeds"],
                           family.encoders.encode_prompts(comps, [""])["prompt_embeds"][0]) and caption


def test_dit_refuses_it_and_the_video_llms_never_read_it():
    from dit_lora.registry import get_family

    dit = TrainConfig.for_family("dit", pretrained_model_name_or_path="unused", caption_dropout_probability=0.1)
    with pytest.raises(UserError, match="DiT is class-conditional and already drops class labels to its null class"):
        get_family("dit").model.validate_config(dit)
    llm = TrainConfig.for_family("qwen2_5_vl", caption_dropout_probability=0.1)
    llm = dataclasses.replace(llm, explicit=frozenset({"caption_dropout_probability"}))
    with pytest.raises(UserError, match="--caption_dropout_probability is an option of diffusion families.*video LLM"):
        check_applies(llm.model.family, llm.explicit)
    for name in ("sana", "wan", "cogvideox"):
        ok = TrainConfig.for_family(name, caption_dropout_probability=0.1)
        ok = dataclasses.replace(ok, explicit=frozenset({"caption_dropout_probability"}))
        check_applies(ok.model.family, ok.explicit)


@pytest.mark.parametrize("value", [1.0, -0.1, float("nan")])
def test_the_probability_is_checked_while_parsing(value, tmp_path):
    from dit_lora.config import parse_config

    with pytest.raises(UserError, match="caption_dropout_probability"):
        parse_config(["--family", "sana", "--train_data_dir", str(tmp_path), "--output_dir", str(tmp_path / "o"),
                      "--pretrained_model_name_or_path", str(tmp_path), "--caption_dropout_probability", str(value)])
