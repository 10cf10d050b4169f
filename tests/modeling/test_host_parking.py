"""modeling/host_parking.py: a parked block's frozen tensors stay in host memory through ``.to()`` (the meta device
stands in for an accelerator: its tensors hold no values, so a move onto it is free and visible), a cast reaches
them, the slots skip swapped blocks on request, a quantized weight is refused by name, and Wan's experts switch
everything but their swapped blocks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dit_lora.core.errors import UserError
from dit_lora.modeling import block_swap
from dit_lora.modeling.host_parking import frozen_slots
from swap_stack import DIM, META, Block, frozen_tensors, lora_stack


def test_to_moves_the_lora_weights_and_the_kept_blocks_but_never_the_swapped_ones():
    originals = {k: t.detach().clone() for k, t in frozen_tensors(lora_stack().blocks[3]).items()}
    model = lora_stack(park=2, device=META)  # the loader's call, before .to(device)
    parked = {k: t.data_ptr() for k, t in frozen_tensors(model.blocks[3]).items()}
    assert model.to(META) is model
    assert all(t.device.type == "cpu" for b in model.blocks[2:] for t in frozen_tensors(b).values())
    assert {k: t.data_ptr() for k, t in frozen_tensors(model.blocks[3]).items()} == parked
    assert all(torch.equal(t, originals[k]) for k, t in frozen_tensors(model.blocks[3]).items())
    assert all(t.is_meta for b in model.blocks[:2] for t in frozen_tensors(b).values())
    assert all(p.is_meta for p in model.parameters() if p.requires_grad)  # LoRA, swapped blocks' included
    model.to(META)  # again (accelerate may place twice): no change
    assert {k: t.data_ptr() for k, t in frozen_tensors(model.blocks[3]).items()} == parked
    model.to(torch.float64)  # a cast reaches the host copies (integer buffers stay)
    dtypes = {k: t.dtype for k, t in frozen_tensors(model.blocks[3]).items()}
    assert dtypes["bits"] == torch.int32 and dtypes["norm.weight"] == torch.float64
    assert all(t.device.type == "cpu" for t in frozen_tensors(model.blocks[3]).values())


def test_frozen_slots_skip_swapped_blocks_on_request():
    model = lora_stack(park=1)
    every = list(frozen_slots(model))
    outside = list(frozen_slots(model, skip_swapped=True))
    swapped = {id(t) for t in frozen_tensors(model.blocks[3]).values()}
    assert len(every) - len(outside) == len(swapped)
    assert not any(id(t) in swapped for _, _, t in outside)
    assert all(not t.requires_grad for _, _, t in every)


def test_a_quantized_weight_is_refused_by_name():
    params4bit = type("Params4bit", (nn.Parameter,), {})
    model = lora_stack()
    model.blocks[3].ff.base_layer.weight = params4bit(torch.zeros(2), requires_grad=False)
    with pytest.raises(UserError, match="cannot swap `ff.base_layer.weight` of a Block: it is a Params4bit"):
        block_swap.install(model, ("blocks",), 1, "cpu")


class _ExpertWithBlocks(nn.Module):
    """A Wan-expert stand-in: a frozen input layer and a block list."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.proj_in = nn.Linear(DIM, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.requires_grad_(False)
        self.config = {}


def test_wan_experts_switch_everything_but_their_swapped_blocks():
    """The A14B experts compose with the swap: WanExperts parks and brings the rest of an expert; each expert's
    swapped blocks stay in host memory for both, even the active one's, until their own forward."""
    from dit_lora.families.wan.experts import WanExperts

    high, low = _ExpertWithBlocks(1), _ExpertWithBlocks(2)
    for expert in (high, low):
        block_swap.park_blocks(expert, ("blocks",), 1, META)
    swapped = {n: {k: t.data_ptr() for k, t in frozen_tensors(e.blocks[2]).items()} for n, e in (("high", high), ("low", low))}
    experts = WanExperts(high, low, offload=True)
    experts.place(META)
    assert experts.residency() == {"high": "meta", "low": "cpu"}
    for name in ("low", "high", "low"):
        experts.activate(name)
        for expert_name, expert in (("high", high), ("low", low)):
            assert {k: t.data_ptr() for k, t in frozen_tensors(expert.blocks[2]).items()} == swapped[expert_name]
        assert all(t.is_meta for t in frozen_tensors(experts.expert(name).blocks[1]).values())
    ids = {id(t) for e in (high, low) for t in frozen_tensors(e.blocks[2]).values()}
    assert not any(i in ids for kept in experts._host.values() for i in kept)  # WanExperts keeps no copy of them
    paths = ("blocks", "high.blocks", "low.blocks")  # the Wan family's names
    assert [len(b) for b in block_swap.block_lists(experts, paths)] == [3, 3]


def test_unpark_makes_a_parked_block_an_ordinary_module_again():
    from dit_lora.modeling.host_parking import park_block, swap_state, unpark

    model = lora_stack()
    block = model.blocks[3]
    assert not unpark(block)  # never parked
    state = park_block(block, torch.device("cpu"))
    assert swap_state(block) is state and park_block(block, torch.device("cpu")) is state  # parked once
    assert unpark(block) and swap_state(block) is None and "_apply" not in block.__dict__
