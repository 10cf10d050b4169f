"""families/flux2/plan.py: the meta components, the planned units of both block lists, the text conditioning."""

from __future__ import annotations

import pytest

from dit_lora.catalogue import by_hub_id
from dit_lora.families.flux2.plan import Flux2Plan
from dit_lora.registry import get_family
from flux2_configs import flux2_cfg


def test_a_planned_unit_is_one_double_block_and_its_share_of_single_blocks():
    with_units = Flux2Plan.units.at_depth
    dev = {"num_layers": 8, "num_single_layers": 48}
    assert with_units(dev, 2) == {"num_layers": 2, "num_single_layers": 12} and with_units(dev, None) == dev
    assert with_units({"num_layers": 5, "num_single_layers": 20}, 3)["num_single_layers"] == 12  # klein 4B
    assert with_units({"num_layers": 8, "num_single_layers": 24}, 8)["num_single_layers"] == 24  # klein 9B, whole


def test_plan_components_from_the_published_klein_configs():
    spec = get_family("flux2")
    entry = by_hub_id("black-forest-labs/FLUX.2-klein-base-4B")
    read = lambda sub, name: entry.configs.get(f"{sub}/{name}" if sub else name)  # noqa: E731
    cfg = flux2_cfg(max_sequence_length=64)
    comps = spec.plan.plan_components(cfg, read, depth=2)
    model = comps.model
    assert model.device.type == "meta" and len(model.transformer_blocks) == 2 and len(model.single_transformer_blocks) == 8
    assert comps.state.pipeline_class == "Flux2KleinPipeline" and not comps.state.guidance_embeds
    assert comps.state.out_layers == (9, 18, 27) and comps.encoders["text_encoder"].device.type == "meta"
    cond = spec.plan.plan_conditioning(comps, cfg, 3)
    assert cond["prompt_embeds"].shape == (3, 64, 7680) and cond["prompt_embeds"].dtype == cfg.weight_dtype


def test_a_swap_counts_the_single_blocks_and_takes_the_same_share_of_the_double_ones():
    """--blocks_to_swap N on FLUX.2 counts the longer list (48 single blocks on dev): N up to 47, where counting
    both lists alike stopped at 7; the run's early check reads the longer list's depth from the config."""
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.setup.resolve import block_count

    spec = get_family("flux2")
    assert ("transformer/config.json", "num_single_layers") in spec.plan.swap_depth_keys
    cfg = TrainConfig(family="flux2", pretrained_model_name_or_path="black-forest-labs/FLUX.2-dev", blocks_to_swap=47)
    assert block_count(cfg.model, spec) == 48  # the catalogue's published config, nothing downloaded
    from dit_lora.modeling import block_swap

    block_swap.check_config(cfg.performance, cfg.model, "flux2", spec.info.block_lists, 48)
    with pytest.raises(UserError, match="at most --blocks_to_swap 47"):
        every = TrainConfig(family="flux2", blocks_to_swap=48)
        block_swap.check_config(every.performance, every.model, "flux2", spec.info.block_lists, 48)


@pytest.mark.slow  # FLUX.2 [dev] planned at full width (a 32B transformer, a 24B text encoder): about 10 s
def test_dev_on_24_gb_gets_flags_whose_own_plan_fits(capsys):
    """``dit-lora plan black-forest-labs/FLUX.2-dev --gpu_memory 24GB`` (offline): the caching phase holds the
    text encoder without the transformer's blocks (they wait in host memory), so the ladder reaches a fit at the
    trained 1024 px with fp8_scaled, the 4-bit text encoder and more blocks swapped than dev has double blocks; the
    flags fed back predict the peak the ladder said, under 24 GB."""
    import re

    from dit_lora.catalogue.defaults import choose_defaults
    from dit_lora.commands.cli import _main
    from dit_lora.config.parser import parse_config
    from dit_lora.plan import ladder, make_plan

    hub_id = "black-forest-labs/FLUX.2-dev"
    assert _main(["plan", hub_id, "--gpu_memory", "24GB"]) == 0
    text = capsys.readouterr().out
    found = re.search(r"flags to copy: (.*?) \(predicted peak (\d+\.\d+) GiB of 24.00 GiB[,)]", text)
    assert found, text
    flags, peak = found.group(1).split(), float(found.group(2))
    assert "--resolution" not in flags and "nf4" not in flags[flags.index("--quantize_base") + 1]
    assert flags[flags.index("--quantize_base") + 1] == "fp8_scaled" and "--quantize_text_encoder" in flags
    assert int(flags[flags.index("--blocks_to_swap") + 1]) > 8  # counted on the 48 single blocks
    cfg = parse_config(["--family", "flux2", "--pretrained_model_name_or_path", hub_id, *flags], needs_data=False)
    fam = get_family("flux2")
    chosen = choose_defaults(cfg, fam)
    plan = make_plan(chosen.config, fam, device="cuda", both_settings=False)
    assert plan.blocks_wait and plan.peak_memory_bytes / 2**30 == pytest.approx(peak, abs=0.006)
    assert plan.peak_memory_bytes <= 24 * 2**30 * (1 - ladder.GPU_ERROR)  # the plan's error kept free
    # the caching phase: no block of the transformer on the device, the text encoder in 4 bits
    blocks = sum(sum(sizes) for sizes in plan.block_sizes) * plan.weights["model"] / plan.model_built_bytes
    assert plan.cache_parked_bytes() == pytest.approx(blocks, rel=1e-6)
    assert plan.cache_phase_bytes < plan.weights["text_encoder"] + plan.weights["model"] - blocks + 4 * 2**30
