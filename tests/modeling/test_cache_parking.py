"""modeling/cache_parking.py: the blocks wait in host memory through the loader's ``.to(device)`` while the cache is
built, then come to the device; the swapped ones stay parked; when a run does not wait; training is unchanged.

The "device" here is ``meta``: a block that went there has left host memory, one that stayed has not, which a CPU
run (where parking aliases the tensors) could not tell apart."""

from __future__ import annotations


import pytest
import torch
from torch import nn

from dit_lora.modeling import cache_parking, host_parking
from config_stand_in import stand_in

DIM, DEPTH = 8, 6


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj_in = nn.Linear(DIM, DIM)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(DIM), nn.Linear(DIM, DIM)) for _ in range(DEPTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj_in(x)
        for block in self.blocks:
            x = x + block(x)
        return x


def _cfg(**values):
    return stand_in(**{"cache_latents": True, "quantize_base": "none", "blocks_to_swap": 0, **values})


def _where(module: nn.Module) -> set[str]:
    return {t.device.type for t in (*module.parameters(), *module.buffers())}


@pytest.mark.parametrize("values,waits", [
    ({}, True),
    ({"quantize_base": "fp8_scaled"}, True),  # plain buffers: parked like any tensor
    ({"cache_latents": False}, False),  # no caching phase: the encoders stay through training
    ({"quantize_base": "nf4"}, False),  # bitsandbytes' weights cannot be parked
    ({"quantize_base": "int8"}, False),
])
def test_which_runs_wait(values, waits):
    assert cache_parking.waits_for_cache(_cfg(**values).data, _cfg(**values).model) is waits


def test_the_blocks_stay_in_host_memory_through_to_and_come_after_the_cache_but_the_swapped():
    model = Stack().requires_grad_(False)
    parked = cache_parking.park_for_load(model, ("blocks",), _cfg(blocks_to_swap=2), "meta")
    assert parked == DEPTH
    model.to("meta")  # the loader's .to(device)
    assert _where(model.proj_in) == {"meta"}  # outside the blocks: on the device at load, as before
    assert all(_where(block) == {"cpu"} for block in model.blocks)
    moved, size = cache_parking.bring_waiting(model, ("blocks",), 2, "meta")
    block_bytes = sum(t.numel() * t.element_size() for t in (*model.blocks[0].parameters(),))
    assert moved == DEPTH - 2 and size == (DEPTH - 2) * block_bytes
    assert all(_where(block) == {"meta"} for block in model.blocks[:-2])
    assert all(_where(block) == {"cpu"} and host_parking.swap_state(block) is not None for block in model.blocks[-2:])
    assert all(host_parking.swap_state(block) is None for block in model.blocks[:-2])  # ordinary modules again
    assert cache_parking.bring_waiting(model, ("blocks",), 2, "meta") == (0, 0)  # once
    assert "4 block(s) (0.00 GiB) that waited in host memory while it was built came to meta" in (
        cache_parking.describe(moved, size, "meta"))
    assert "were in place (the CPU is the device)" in cache_parking.describe(moved, size, "cpu")


@pytest.mark.parametrize("values", [{"cache_latents": False}, {"quantize_base": "nf4"}])
def test_a_run_that_does_not_wait_parks_only_the_swapped_blocks(values):
    model = Stack().requires_grad_(False)
    assert cache_parking.park_for_load(model, ("blocks",), _cfg(blocks_to_swap=1, **values), "meta") == 1
    model.to("meta")
    assert all(_where(block) == {"meta"} for block in model.blocks[:-1]) and _where(model.blocks[-1]) == {"cpu"}
    assert cache_parking.bring_waiting(model, ("blocks",), 1, "meta") == (0, 0)


class _Packed(nn.Parameter):
    """A weight subclass parking cannot move (bitsandbytes' Params4bit, in a folder quantized by its own config)."""


def test_a_folder_quantized_by_its_own_config_keeps_its_blocks_where_they_load():
    model = Stack().requires_grad_(False)
    linear = model.blocks[2][1]
    linear.weight = _Packed(linear.weight.data, requires_grad=False)
    assert cache_parking.park_for_load(model, ("blocks",), _cfg(), "meta") == 0  # no refusal: no flag asked for it
    model.to("meta")
    assert all(_where(block) == {"meta"} for block in model.blocks)


def test_a_family_may_keep_its_blocks_on_the_device():
    model = Stack().requires_grad_(False)
    assert cache_parking.park_for_load(model, ("blocks",), _cfg(), "meta", wait=False) == 0
    model.to("meta")
    assert _where(model) == {"meta"}


def test_waiting_changes_no_value_the_model_computes():
    torch.manual_seed(0)
    reference = Stack()
    model = Stack()
    model.load_state_dict(reference.state_dict())
    model.requires_grad_(False)
    cache_parking.park_for_load(model, ("blocks",), _cfg(), "cpu")
    model.to("cpu")
    assert cache_parking.bring_waiting(model, ("blocks",), 0, "cpu")[0] == DEPTH
    x = torch.randn(3, DIM)
    assert torch.equal(model(x), reference(x))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_waiting_blocks_hold_no_device_memory_until_brought():
    model = Stack().requires_grad_(False)
    block_bytes = sum(t.numel() * t.element_size() for t in model.blocks.parameters())
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    cache_parking.park_for_load(model, ("blocks",), _cfg(blocks_to_swap=1), "cuda")
    model.to("cuda")
    held = torch.cuda.memory_allocated() - start
    # proj_in alone: the allocator rounds each tensor up to 512 bytes; the blocks would be ~13 KB more
    assert held <= 512 * len(list(model.proj_in.parameters())) < block_bytes
    assert all(_where(block) == {"cpu"} for block in model.blocks)
    moved, size = cache_parking.bring_waiting(model, ("blocks",), 1, "cuda")
    assert moved == DEPTH - 1 and torch.cuda.memory_allocated() - start >= size
    assert _where(model.blocks[0]) == {"cuda"} and _where(model.blocks[-1]) == {"cpu"}
