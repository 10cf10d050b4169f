"""modeling/swap_hooks.py: the swapped blocks come to the device around each block's forward and backward, with
LoRA (PEFT) on them.

On the CPU the "device" is the CPU and the copies are real copies into fresh memory, so every path runs here: a
step with the swap is bitwise a step without it (no checkpointing, torch's non-reentrant checkpoint as the families
use it, the reentrant one), the parked tensors point at their host copies between uses (the device copies dropped),
and at most two blocks are on the device at once. The CUDA test (streams, pinned memory, the memory it saves) is
marked ``gpu``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from dit_lora.core.errors import UserError
from dit_lora.modeling import block_swap
from dit_lora.modeling.host_parking import frozen_slots
from dit_lora.modeling.swap_hooks import BlockSwap
from swap_stack import DIM, Block, Stack, block_bytes, frozen_tensors, lora_stack, train_steps


@pytest.mark.parametrize("checkpointing", ["off", "non_reentrant", "reentrant"])
def test_training_with_the_swap_is_bitwise_training_without_it(checkpointing):
    reference = train_steps(lora_stack(checkpointing))
    model = lora_stack(checkpointing)
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    assert isinstance(swap, BlockSwap) and block_swap.installed(model) is swap
    losses, trained = train_steps(model)
    assert all(torch.equal(a, b) for a, b in zip(losses, reference[0]))
    assert trained.keys() == reference[1].keys()
    assert all(torch.equal(trained[k], reference[1][k]) for k in trained), checkpointing
    assert swap.stats.copies > 0  # the blocks really came and went


@pytest.mark.parametrize("checkpointing", ["off", "non_reentrant"])
def test_fp8_scaled_blocks_swap_bitwise(checkpointing):
    """``--quantize_base fp8_scaled`` keeps its weights in plain buffers, which its backward saves itself: they swap."""
    pytest.importorskip("dit_lora.modeling.fp8_scaled")
    reference = train_steps(lora_stack(checkpointing, fp8=True))
    model = lora_stack(checkpointing, fp8=True)
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    assert any("fp8_weight" in key for _, key, _ in frozen_slots(model.blocks[3]))
    losses, trained = train_steps(model)
    assert all(torch.equal(a, b) for a, b in zip(losses, reference[0]))
    assert all(torch.equal(trained[k], reference[1][k]) for k in trained) and swap.stats.copies > 0


def test_between_uses_the_frozen_tensors_are_their_host_copies_and_in_use_fresh_device_copies():
    model = lora_stack()
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    swapped = list(model.blocks[2:])
    parked = {id(t): t.data_ptr() for block in swapped for t in frozen_tensors(block).values()}
    kept = {id(t): t.data_ptr() for t in frozen_tensors(model.blocks[0]).values()}
    seen = []

    def inside(module, args):  # registered after the swap's: runs once the block is on the device
        seen.append({id(t): t.data_ptr() for t in frozen_tensors(module).values()})

    for block in swapped:
        block.register_forward_pre_hook(inside)
    train_steps(model, steps=1)
    assert len(seen) == 2
    for pointers in seen:  # in use: copies in fresh memory, not the host copies
        assert pointers.keys() <= parked.keys() and all(pointers[k] != parked[k] for k in pointers)
    after = {id(t): t.data_ptr() for block in swapped for t in frozen_tensors(block).values()}
    assert after == parked  # the device copies were dropped: each tensor points at its host copy again
    assert {id(t): t.data_ptr() for t in frozen_tensors(model.blocks[0]).values()} == kept  # not swapped: untouched
    assert swap.resident == {} and swap.device_bytes() == 0


def test_at_most_two_blocks_are_on_the_device_at_once_and_the_last_one_stays_for_the_backward():
    model = lora_stack()
    swap = block_swap.install(model, ("blocks",), 3, "cpu")
    train_steps(model, steps=1)
    assert swap.stats.peak_bytes == 2 * block_bytes(model.blocks[1])
    # forward: 3 blocks (the first fetched while block 0 computes); backward: 2 (the last block stayed)
    assert swap.stats.copies == 5


def test_lora_weights_never_move_and_get_their_gradients():
    model = lora_stack()
    loras = {n: p for n, p in model.named_parameters() if p.requires_grad}
    pointers = {n: p.data_ptr() for n, p in loras.items()}
    block_swap.install(model, ("blocks",), 2, "cpu")
    train_steps(model, steps=2)
    now = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert {n: id(p) for n, p in now.items()} == {n: id(p) for n, p in loras.items()}
    assert {n: p.data_ptr() for n, p in now.items()} == pointers
    assert any(".blocks.3." in f".{n}" for n in now)  # the swapped blocks carry LoRA too


def test_validation_without_grad_leaves_every_block_parked():
    model = lora_stack()
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    with torch.no_grad():
        model(torch.randn(1, 5, DIM))
    assert swap.resident == {}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("checkpointing", ["off", "non_reentrant"])
def test_on_cuda_the_swap_saves_the_swapped_blocks_and_trains_alike(checkpointing):
    """Pinned host copies, side-stream copies: the same losses and LoRA weights as without the swap (up to the
    GPU's run-to-run reduction order), and the device's peak lower by the swapped blocks' bytes less the three
    blocks at most in flight (the one computing, the one arriving, the one whose memory the compute stream frees)."""
    depth, dim, count = 8, 512, 6  # blocks large enough for their bytes to show against the allocator's rounding
    results = {}
    for swapped in (0, count):
        model = lora_stack(checkpointing, depth, dim, park=swapped, device="cuda")
        model.to("cuda")
        swap = block_swap.install(model, ("blocks",), swapped, "cuda")
        if swap is not None:
            assert all(t.is_pinned() for b in model.blocks[depth - count:] for t in frozen_tensors(b).values())
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        g = torch.Generator(device="cuda").manual_seed(1)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-2)
        losses = []
        for _ in range(3):
            loss = model(torch.randn(4, 64, dim, generator=g, device="cuda")).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        torch.cuda.synchronize()
        results[swapped] = (torch.stack(losses).cpu(), [p.detach().cpu() for p in params],
                            torch.cuda.max_memory_allocated(), block_bytes(model.blocks[0]))
        if swap is not None:
            assert swap.resident == {}
            assert all(t.device.type == "cpu" for b in model.blocks[depth - count:] for t in frozen_tensors(b).values())
        del model, opt
    torch.testing.assert_close(results[count][0], results[0][0], rtol=1e-4, atol=1e-5)
    for a, b in zip(results[count][1], results[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert results[0][2] - results[count][2] >= (count - 3) * results[0][3]


class TwoLists(Stack):
    """Two block lists of unequal length, run one after the other (FLUX.2's double then single blocks)."""

    def __init__(self, checkpointing: str = "off") -> None:
        super().__init__(checkpointing, depth=2)
        self.singles = nn.ModuleList(Block(DIM) for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = super().forward(x)
        for block in self.singles:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing != "off" else block(x)
        return x


def _two_lists(checkpointing: str) -> nn.Module:
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(0)
    model = TwoLists(checkpointing).requires_grad_(False)
    model = inject_adapter_in_model(LoraConfig(r=2, target_modules=["to_q", "ff"], init_lora_weights="gaussian"), model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    return model


@pytest.mark.parametrize("checkpointing", ["off", "non_reentrant"])
def test_two_lists_of_unequal_length_swap_their_shares_and_train_bitwise_alike(checkpointing):
    reference = train_steps(_two_lists(checkpointing))
    model = _two_lists(checkpointing)
    paths = ("blocks", "singles")
    with pytest.raises(UserError, match="at most --blocks_to_swap 5"):
        block_swap.swapped_blocks(model, paths, 6)
    swap = block_swap.install(model, paths, 3, "cpu")  # 3 of the 6 singles, 1 of the 2 blocks
    assert [[s.module for s in states] for states in swap.lists] == [[model.blocks[1]], list(model.singles[3:])]
    losses, trained = train_steps(model)
    assert all(torch.equal(a, b) for a, b in zip(losses, reference[0]))
    assert all(torch.equal(trained[k], reference[1][k]) for k in trained)
    assert swap.stats.copies > 0
