"""Lumina 2's model checks and precision: a caption length its RoPE table cannot place and a size the transformer
cannot patch refused in one paragraph; the embedders and the output projection kept out of --quantize_base; an
uncatalogued model's resolution from its sample_size."""

from __future__ import annotations

import pytest
import torch


def test_sizes_and_caption_lengths_the_model_cannot_take_are_refused(tiny_lumina2, tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_spec

    model = get_spec("lumina2").model

    def cfg(**options):
        return TrainConfig.for_family("lumina2", pretrained_model_name_or_path=str(tiny_lumina2),
                                      train_data_dir=str(tmp_path), **{"resolution": 64, **options})

    model.validate_config(cfg(max_sequence_length=299))  # the demo's model passes, at the longest caption it holds
    with pytest.raises(UserError) as refused:
        model.validate_config(cfg(max_sequence_length=300))
    text = str(refused.value)
    assert "axes_lens[0] = 300" in text and "--max_sequence_length 299" in text and "\n" not in text
    with pytest.raises(UserError, match="not a multiple of 16"):
        model.validate_config(cfg(resolution=72))


def test_the_embedders_and_the_output_projection_stay_out_of_quantization():
    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import quantize_skip_modules
    from dit_lora.registry import get_spec

    skipped = quantize_skip_modules(get_spec("lumina2"))
    assert {"x_embedder", "time_caption_embed", "norm_out"} <= set(skipped)


def test_an_uncatalogued_models_resolution_is_its_sample_size_times_8(tiny_lumina2):
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    cfg = TrainConfig.for_family("lumina2", pretrained_model_name_or_path=str(tiny_lumina2))
    assert get_spec("lumina2").defaults.generic_defaults(cfg.model, cfg.family_options)["resolution"][0] == 64  # sample_size 8 x 8


def test_the_rope_embedder_takes_the_hosts_counts_during_a_loss_and_reads_its_mask_otherwise():
    """Given the counts (CountedMask), the embedder's outputs are those of reading the real mask, with no device
    read; with none set (validation) diffusers' own reading runs."""
    from dit_lora.families.lumina2.demo import build_tiny_lumina2_components
    from dit_lora.families.lumina2.model import CountedMask, give_host_counts
    from dit_lora.families.lumina2.state import Lumina2Run

    transformer = build_tiny_lumina2_components()["transformer"]
    state = Lumina2Run()
    give_host_counts(transformer, state)
    give_host_counts(transformer, state)  # once only: no wrapper around the wrapper
    latents = torch.zeros(2, 4, 8, 8)
    mask = (torch.arange(6).expand(2, 6) < torch.tensor([[3], [6]])).long()
    read = transformer.rope_embedder(latents, mask)
    state.caption_counts = [3, 6]
    given = transformer.rope_embedder(latents, torch.zeros(2, 6))  # an all-zero mask: its values are never read
    assert given[4] == read[4] == [3, 6] and given[5] == read[5]
    assert all(torch.equal(a, b) for a, b in zip(given[1:4], read[1:4]))
    with pytest.raises(ValueError, match="caption axis"):
        CountedMask(mask.shape, [3, 6]).sum(dim=0)


def test_a_deep_copy_of_the_components_gives_its_embedder_its_own_state():
    """The plan deep-copies the components for each setting: the copied embedder reads the copied state."""
    import copy

    from dit_lora.contract.family import Components
    from dit_lora.families.lumina2.demo import build_tiny_lumina2_components
    from dit_lora.families.lumina2.model import give_host_counts
    from dit_lora.families.lumina2.state import Lumina2Run

    comps = Components(model=build_tiny_lumina2_components()["transformer"], scheduler=None, state=Lumina2Run())
    give_host_counts(comps.model, comps.state)
    twin = copy.deepcopy(comps)
    twin.state.caption_counts = [2, 5]
    out = twin.model.rope_embedder(torch.zeros(2, 4, 8, 8), torch.zeros(2, 6))  # the counts, not the zeros
    assert out[4] == [2, 5] and comps.state.caption_counts is None
