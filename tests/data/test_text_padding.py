"""data/text_padding.py: the caption length a run cuts its batches to, and that the cut changes nothing."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from dit_lora.data.text_padding import ROUND_TO, cut_text_padding, used_text_length


def _cache(tmp_path, masks: list[torch.Tensor]):
    files = []
    for i, mask in enumerate(masks):
        file = tmp_path / f"{i}.safetensors"
        save_file({"latents": torch.zeros(2), "prompt_attention_mask": mask.long().contiguous()}, str(file))
        files.append(file)
    return files


@pytest.mark.parametrize("seed", range(6))
def test_the_length_covers_every_attended_position_of_every_file(tmp_path, seed):
    gen = torch.Generator().manual_seed(seed)
    padded = 300
    masks = []
    for _ in range(5):
        mask = torch.zeros(padded)
        mask[: int(torch.randint(1, padded, (1,), generator=gen))] = 1
        if seed % 2:  # not only prefixes: a stray attended position further right counts too
            mask[int(torch.randint(0, padded, (1,), generator=gen))] = 1
        masks.append(mask)
    length = used_text_length(_cache(tmp_path, masks))
    last = max(int(torch.nonzero(m).max()) + 1 for m in masks)
    assert last <= length <= padded and (length % ROUND_TO == 0 or length == padded) and length - last < ROUND_TO


def test_a_full_caption_keeps_every_token_and_a_cache_without_masks_cuts_nothing(tmp_path):
    assert used_text_length(_cache(tmp_path, [torch.ones(300), torch.ones(3)])) == 300
    (tmp_path / "plain").mkdir()
    save_file({"latents": torch.zeros(2)}, str(tmp_path / "plain" / "0.safetensors"))
    assert used_text_length([tmp_path / "plain" / "0.safetensors"]) is None and used_text_length([]) is None


def test_cut_is_a_view_and_a_no_op_when_not_shorter():
    embeds, mask = torch.randn(2, 300, 4), torch.ones(2, 300)
    cut, cut_mask = cut_text_padding(embeds, mask, 16)
    assert cut.shape == (2, 16, 4) and cut_mask.shape == (2, 16) and cut.data_ptr() == embeds.data_ptr()
    assert cut_text_padding(embeds, mask, None)[0] is embeds and cut_text_padding(embeds, mask, 300)[0] is embeds


@pytest.mark.parametrize("seed", range(4))
def test_sana_computes_the_same_function_on_the_cut_captions(tiny_sana, seed):
    """The tiny Sana transformer (fp32) on padded captions vs the same captions cut to their used length: batch 3
    with different caption lengths, outputs and LoRA-free input gradients agree to float rounding."""
    from diffusers import SanaTransformer2DModel

    model = SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    cfg, padded = model.config, 300
    lengths = torch.randint(1, 40, (3,), generator=gen)
    mask = (torch.arange(padded)[None] < lengths[:, None]).long()
    embeds = torch.randn(3, padded, cfg.caption_channels, generator=gen)
    embeds[mask == 0] = torch.randn(int((mask == 0).sum()), cfg.caption_channels, generator=gen) * 50  # junk padding
    latents = torch.randn(3, cfg.in_channels, 4, 4, generator=gen)
    timestep = torch.rand(3, generator=gen) * 1000
    keep = -(-int(lengths.max()) // ROUND_TO) * ROUND_TO

    def run(e, m):
        x = latents.clone().requires_grad_(True)
        out = model(hidden_states=x, encoder_hidden_states=e, encoder_attention_mask=m, timestep=timestep,
                    return_dict=False)[0]
        out.square().sum().backward()
        return out.detach(), x.grad

    full, full_grad = run(embeds, mask)
    cut, cut_grad = run(*cut_text_padding(embeds, mask, keep))
    torch.testing.assert_close(cut, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cut_grad, full_grad, rtol=1e-4, atol=1e-5)


def test_sanas_loss_feeds_the_model_the_cut_captions_and_the_same_loss(tiny_sana):
    """compute_loss hands the transformer the first ``text_tokens`` caption tokens when the run set them (and all
    of them otherwise), and the loss is the same to rounding: the wiring of the cut, not only its arithmetic."""
    from diffusers import SanaTransformer2DModel

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family
    from dit_lora.contract.family import Components
    from dit_lora.families.sana.state import SanaRun
    from dit_lora.modeling.flow_matching import training_scheduler

    model = SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=torch.float32)
    seen = []
    model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs["encoder_hidden_states"].shape[1]),
                                    with_kwargs=True)
    gen = torch.Generator().manual_seed(0)
    cfg_model = model.config
    mask = (torch.arange(300)[None] < torch.tensor([[5], [11]])).long()
    batch = {"latents": torch.randn(2, cfg_model.in_channels, 4, 4, generator=gen),
             "prompt_embeds": torch.randn(2, 300, cfg_model.caption_channels, generator=gen), "prompt_attention_mask": mask}
    cfg = TrainConfig(family="sana", mixed_precision="no")
    family = get_family("sana")

    def loss(text_tokens):
        comps = Components(model=model, scheduler=training_scheduler({"shift": 3.0}),
                           state=SanaRun(text_tokens=text_tokens))
        with torch.no_grad():
            return family.loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(1), cfg)

    full, cut = loss(None), loss(16)
    assert seen == [300, 16]
    torch.testing.assert_close(cut, full, rtol=1e-5, atol=1e-6)


def test_a_ragged_caption_is_cached_to_its_tokens_and_batched_back_padded(tmp_path):
    """An encoding with ``K`` and ``K_lengths`` (Ideogram 4's captions): each cache row keeps its own tokens, a batch
    pads them with zeros to its longest, check-data compares the rest of their shapes, and a tensor without the
    companion is stacked as before."""
    from safetensors.torch import load_file

    from dit_lora.data.batches import CachedLatentDataset, collate
    from dit_lora.data.cache import _atomic_save, _row, inspect_cache_file
    from dit_lora.data.text_padding import comparable_shapes

    features = torch.randn(3, 7, 5)
    batch = {"latents": torch.randn(3, 4, 2, 2), "prompt_embeds": features,
             "prompt_embeds_lengths": torch.tensor([7, 2, 4])}  # fmt: skip
    files = []
    for r in range(3):
        files.append(tmp_path / f"{r}.safetensors")
        _atomic_save(_row(batch, r), files[-1])
    assert [load_file(str(f))["prompt_embeds"].shape[0] for f in files] == [7, 2, 4]
    torch.testing.assert_close(load_file(str(files[1]))["prompt_embeds"], features[1, :2])
    items = [CachedLatentDataset(files)[(i, False)] for i in (1, 2)]
    out = collate(items)
    assert out["prompt_embeds"].shape == (2, 4, 5) and out["prompt_embeds_lengths"].tolist() == [2, 4]
    torch.testing.assert_close(out["prompt_embeds"][0, :2], features[1, :2])
    assert not out["prompt_embeds"][0, 2:].any() and out["latents"].shape == (2, 4, 2, 2)
    shapes = [comparable_shapes(inspect_cache_file(f)[1]) for f in files]
    assert shapes[0] == shapes[1] == shapes[2]  # check-data finds nothing wrong with ragged rows
    with pytest.raises(RuntimeError):  # without the companion, rows of different lengths are an error as before
        collate([{"prompt_embeds": features[0]}, {"prompt_embeds": features[1, :2]}])


def test_the_empty_captions_entry_keeps_its_own_tokens_too(tmp_path):
    from safetensors.torch import load_file

    from dit_lora.data.caption_dropout import ensure_empty_prompt

    def encode(captions):
        return {"prompt_embeds": torch.ones(1, 9, 3), "prompt_embeds_lengths": torch.tensor([4])}

    assert ensure_empty_prompt(tmp_path / "empty.safetensors", encode, print)
    assert load_file(str(tmp_path / "empty.safetensors"))["prompt_embeds"].shape == (4, 3)
