"""modeling/block_swap.py: which blocks ``--blocks_to_swap N`` swaps (the last N of the longest list, the same share
of the others), what it refuses before anything loads, the bytes it moves, and install/remove around the hooks
(tests/modeling/test_swap_hooks.py) and the parking (test_host_parking.py)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.modeling import block_swap
from dit_lora.modeling.host_parking import swap_state
from swap_stack import DEPTH, Stack, block_bytes, frozen_tensors, lora_stack, train_steps


def test_install_after_park_blocks_reuses_the_parked_copies_and_remove_undoes_everything():
    model, reference = lora_stack(park=2), lora_stack()
    parked = {id(t): t.data_ptr() for b in model.blocks[2:] for t in frozen_tensors(b).values()}
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    assert swap is not None
    assert {id(t): t.data_ptr() for b in model.blocks[2:] for t in frozen_tensors(b).values()} == parked
    swap.remove()
    for block in model.modules():
        assert not block._forward_hooks and not block._forward_pre_hooks
        assert swap_state(block) is None and "_apply" not in block.__dict__
    assert block_swap.installed(model) is None
    losses, trained = train_steps(model)
    ref_losses, ref_trained = train_steps(reference)
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    assert all(torch.equal(trained[k], ref_trained[k]) for k in trained)


def test_the_swapped_frozen_tensors_are_kept_out_of_ddp():
    model = lora_stack()
    model._ddp_params_and_buffers_to_ignore = ["proj_in.base_layer.bias"]  # another lever's (fp8 buffers): kept
    block_swap.install(model, ("blocks",), 1, "cpu")
    ignored = set(model._ddp_params_and_buffers_to_ignore)
    assert "proj_in.base_layer.bias" in ignored
    assert {"blocks.3.norm.weight", "blocks.3.to_q.base_layer.weight", "blocks.3.scale", "blocks.3.bits"} <= ignored
    assert not any(".lora_" in n or n.startswith("blocks.2.") for n in ignored)


def test_swap_bytes_counts_the_swapped_blocks_on_a_meta_model():
    with torch.device("meta"):
        model = Stack()
    total, largest = block_swap.swap_bytes(model, ("blocks",), 3)
    assert largest == block_bytes(model.blocks[0]) and total == 3 * largest
    assert block_swap.swap_bytes(model, ("blocks",), 0) == (0, 0)


@pytest.mark.parametrize("count", [DEPTH, DEPTH + 3])
def test_as_many_blocks_as_the_model_has_is_refused(count):
    with pytest.raises(UserError, match=f"--blocks_to_swap {count} asks for .* of the model's {DEPTH} blocks.*"
                       f"at most --blocks_to_swap {DEPTH - 1}"):
        block_swap.install(lora_stack(), ("blocks",), count, "cpu")


def test_a_model_without_the_named_block_list_is_refused():
    with pytest.raises(UserError, match="has none of the block lists its spec names .*transformer_blocks"):
        block_swap.install(lora_stack(), ("transformer_blocks",), 1, "cpu", family="toy")


def _cfg(**values) -> TrainConfig:
    return TrainConfig(pretrained_model_name_or_path="unused", train_data_dir="unused", **values)


def _check(cfg: TrainConfig, family, paths, depth) -> None:
    """block_swap.check_config on the two sections it reads."""
    block_swap.check_config(cfg.performance, cfg.model, family, paths, depth)


@pytest.mark.parametrize("values,match", [
    (dict(blocks_to_swap=2, compile="blocks"), "cannot run with --compile blocks"),
    (dict(blocks_to_swap=2, quantize_base="nf4"), "cannot swap a --quantize_base nf4 model"),
    (dict(blocks_to_swap=28), "asks for all of the model's 28 blocks.*at most --blocks_to_swap 27"),
])
def test_check_config_refuses_what_the_swap_cannot_take(values, match):
    with pytest.raises(UserError, match=match):
        _check(_cfg(**values), "sana", ("transformer_blocks",), depth=28)


def test_check_config_refuses_a_family_without_a_block_list_and_passes_the_rest():
    with pytest.raises(UserError, match="the `toy` family names no list of repeated blocks"):
        _check(_cfg(blocks_to_swap=1), "toy", (), depth=None)
    _check(_cfg(blocks_to_swap=0, compile="blocks"), "toy", (), depth=None)  # off: nothing to say
    _check(_cfg(blocks_to_swap=27), "sana", ("transformer_blocks",), depth=28)
    _check(_cfg(blocks_to_swap=99), "sana", ("transformer_blocks",), depth=None)  # at install


@pytest.mark.parametrize("lengths,count,expected", [
    ([8, 48], 1, [1, 1]),  # FLUX.2 [dev]: the double list swaps its share, rounded up
    ([8, 48], 20, [4, 20]),
    ([8, 48], 47, [7, 47]),  # one block of each list stays
    ([5, 20], 19, [4, 19]),  # klein 4B
    ([40, 40], 30, [30, 30]),  # Wan A14B's two experts: the same count each
    ([6], 5, [5]),
    ([1, 6], 4, [0, 4]),  # a list of one block swaps none
    ([0, 6], 2, [0, 2]),  # nor an empty one
    ([8, 48], 0, [0, 0]),
])
def test_per_list_counts_take_the_longest_lists_count_and_the_same_share_of_the_others(lengths, count, expected):
    assert block_swap.per_list_counts(lengths, count) == expected
