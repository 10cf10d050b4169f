"""The family spec's block lists (``FamilyInfo.block_lists``, what ``--blocks_to_swap`` swaps) checked on a model
folder: a plain module on the tests' path (``from block_lists import assert_block_lists``)."""

from __future__ import annotations

from pathlib import Path


def assert_block_lists(family: str, model: Path, lists: int = 1, **options) -> None:
    """``family``'s block lists name, on its model built from ``model``'s configs (on the meta device, as the memory
    plan builds it), ``lists`` lists of as many blocks as the config says (the plan's depth key), whose swapped
    bytes add up (a one-block model, as the tiny Wan, has nothing to swap: at least one block stays)."""
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.config import TrainConfig
    from dit_lora.modeling.block_swap import block_lists, swap_bytes
    from dit_lora.registry import get_spec
    from dit_lora.setup.resolve import block_count

    spec = get_spec(family)
    cfg = TrainConfig.for_family(family, pretrained_model_name_or_path=str(model), train_data_dir="unused",
                                 **options)
    depth = block_count(cfg.model, spec)
    assert spec.plan is not None and depth is not None
    model_on_meta = spec.plan.plan_components(cfg, config_reader(cfg.model)).model
    found = block_lists(model_on_meta, spec.info.block_lists)
    assert [len(blocks) for blocks in found] == [depth] * lists, (family, spec.info.block_lists)
    total, largest = swap_bytes(model_on_meta, spec.info.block_lists, depth - 1)
    assert (largest > 0 or depth == 1) and total == (depth - 1) * lists * largest  # repeated blocks: alike
