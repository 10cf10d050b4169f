"""modeling/block_swap.py: the last N blocks' frozen tensors wait in host memory and come to the device around each
block's forward and backward, with LoRA (PEFT) on the swapped blocks.

On the CPU the "device" is the CPU and the copies are real copies into fresh memory, so every path runs here: a
step with the swap is bitwise a step without it (no checkpointing, torch's non-reentrant checkpoint as the families
use it, the reentrant one), the parked tensors point at their host copies between uses (the device copies dropped),
and at most two blocks are on the device at once. ``.to()`` is checked with the meta device standing in for an
accelerator (its tensors hold no values, so a move onto it is free and visible). The CUDA test (streams, pinned
memory, the memory it saves) is marked ``gpu``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.modeling import block_swap
from dit_lora.modeling.block_swap import BlockSwap

META = torch.device("meta")
DIM, DEPTH = 16, 4


class _Reinterpreted(torch.autograd.Function):
    """Saves a frozen buffer's bits as another dtype (fp8_scaled's payload view is the real case): the swap must
    rebuild a saved view whose dtype is not its storage owner's."""

    @staticmethod
    def forward(ctx, x, bits):
        as_float = bits.view(torch.float32)
        ctx.save_for_backward(as_float)
        return x * as_float

    @staticmethod
    def backward(ctx, grad):
        (as_float,) = ctx.saved_tensors
        return grad * as_float, None


class Block(nn.Module):
    """A norm (saves its weight itself), two linears (save a view of theirs), a buffer, a reinterpreted buffer."""

    def __init__(self, dim: int = DIM) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim)
        self.ff = nn.Linear(dim, dim)
        self.register_buffer("scale", torch.rand(dim))
        self.register_buffer("bits", (torch.rand(dim) + 0.5).view(torch.int32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ff(torch.relu(self.to_q(self.norm(x))))
        return x + _Reinterpreted.apply(h, self.bits) * self.scale


class Stack(nn.Module):
    """An input projection and a list of blocks, checkpointed as diffusers (non-reentrant) or the reentrant way."""

    def __init__(self, checkpointing: str = "off", depth: int = DEPTH, dim: int = DIM) -> None:
        super().__init__()
        self.proj_in = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.checkpointing = checkpointing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj_in(x)
        for block in self.blocks:
            if self.checkpointing != "off" and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=self.checkpointing == "reentrant")
            else:
                x = block(x)
        return x


def _model(checkpointing: str = "off", depth: int = DEPTH, dim: int = DIM, park: int = 0, device="cpu",
           fp8: bool = False) -> nn.Module:
    """The stack, frozen, with LoRA through PEFT on every linear (lora_B drawn too, so every LoRA weight has a
    gradient); the same weights at every call. ``park``: blocks parked first, as a family's loader does (before
    LoRA: PEFT then makes the swapped blocks' LoRA weights where their base weights are, in host memory)."""
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(0)
    model = Stack(checkpointing, depth, dim).requires_grad_(False)
    if fp8:  # --quantize_base fp8_scaled: e4m3 payload and scale buffers, converted at load
        from dit_lora.modeling.fp8_scaled import convert

        convert(model, [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.startswith("blocks.")])
    block_swap.park_blocks(model, ("blocks",), park, device)
    config = LoraConfig(r=2, target_modules=["to_q", "ff", "proj_in"], init_lora_weights="gaussian")
    model = inject_adapter_in_model(config, model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    return model


def _train(model: nn.Module, steps: int = 2) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """``steps`` AdamW updates on fixed inputs: the losses and the trained weights."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(params.values(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(3, 5, DIM, generator=g)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, {n: p.detach().clone() for n, p in params.items()}


def _frozen(module: nn.Module) -> dict[str, torch.Tensor]:
    return {**{k: p for k, p in module.named_parameters() if not p.requires_grad}, **dict(module.named_buffers())}


def _block_bytes(block: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in _frozen(block).values())


@pytest.mark.parametrize("checkpointing", ["off", "non_reentrant", "reentrant"])
def test_training_with_the_swap_is_bitwise_training_without_it(checkpointing):
    reference = _train(_model(checkpointing))
    model = _model(checkpointing)
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    assert isinstance(swap, BlockSwap) and block_swap.installed(model) is swap
    losses, trained = _train(model)
    assert all(torch.equal(a, b) for a, b in zip(losses, reference[0]))
    assert trained.keys() == reference[1].keys()
    assert all(torch.equal(trained[k], reference[1][k]) for k in trained), checkpointing
    assert swap.stats.copies > 0  # the blocks really came and went


@pytest.mark.parametrize("checkpointing", ["off", "non_reentrant"])
def test_fp8_scaled_blocks_swap_bitwise(checkpointing):
    """``--quantize_base fp8_scaled`` keeps its weights in plain buffers, which its backward saves itself: they swap."""
    pytest.importorskip("dit_lora.modeling.fp8_scaled")
    reference = _train(_model(checkpointing, fp8=True))
    model = _model(checkpointing, fp8=True)
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    assert any("fp8_weight" in key for _, key, _ in block_swap.frozen_slots(model.blocks[3]))
    losses, trained = _train(model)
    assert all(torch.equal(a, b) for a, b in zip(losses, reference[0]))
    assert all(torch.equal(trained[k], reference[1][k]) for k in trained) and swap.stats.copies > 0


def test_between_uses_the_frozen_tensors_are_their_host_copies_and_in_use_fresh_device_copies():
    model = _model()
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    swapped = list(model.blocks[2:])
    parked = {id(t): t.data_ptr() for block in swapped for t in _frozen(block).values()}
    kept = {id(t): t.data_ptr() for t in _frozen(model.blocks[0]).values()}
    seen = []

    def inside(module, args):  # registered after the swap's: runs once the block is on the device
        seen.append({id(t): t.data_ptr() for t in _frozen(module).values()})

    for block in swapped:
        block.register_forward_pre_hook(inside)
    _train(model, steps=1)
    assert len(seen) == 2
    for pointers in seen:  # in use: copies in fresh memory, not the host copies
        assert pointers.keys() <= parked.keys() and all(pointers[k] != parked[k] for k in pointers)
    after = {id(t): t.data_ptr() for block in swapped for t in _frozen(block).values()}
    assert after == parked  # the device copies were dropped: each tensor points at its host copy again
    assert {id(t): t.data_ptr() for t in _frozen(model.blocks[0]).values()} == kept  # not swapped: untouched
    assert swap.resident == {} and swap.device_bytes() == 0


def test_at_most_two_blocks_are_on_the_device_at_once_and_the_last_one_stays_for_the_backward():
    model = _model()
    swap = block_swap.install(model, ("blocks",), 3, "cpu")
    _train(model, steps=1)
    assert swap.stats.peak_bytes == 2 * _block_bytes(model.blocks[1])
    # forward: 3 blocks (the first fetched while block 0 computes); backward: 2 (the last block stayed)
    assert swap.stats.copies == 5


def test_lora_weights_never_move_and_get_their_gradients():
    model = _model()
    loras = {n: p for n, p in model.named_parameters() if p.requires_grad}
    pointers = {n: p.data_ptr() for n, p in loras.items()}
    block_swap.install(model, ("blocks",), 2, "cpu")
    _train(model, steps=2)
    now = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert {n: id(p) for n, p in now.items()} == {n: id(p) for n, p in loras.items()}
    assert {n: p.data_ptr() for n, p in now.items()} == pointers
    assert any(".blocks.3." in f".{n}" for n in now)  # the swapped blocks carry LoRA too


def test_to_moves_the_lora_weights_and_the_kept_blocks_but_never_the_swapped_ones():
    originals = {k: t.detach().clone() for k, t in _frozen(_model().blocks[3]).items()}
    model = _model(park=2, device=META)  # the loader's call, before .to(device)
    parked = {k: t.data_ptr() for k, t in _frozen(model.blocks[3]).items()}
    assert model.to(META) is model
    assert all(t.device.type == "cpu" for b in model.blocks[2:] for t in _frozen(b).values())
    assert {k: t.data_ptr() for k, t in _frozen(model.blocks[3]).items()} == parked
    assert all(torch.equal(t, originals[k]) for k, t in _frozen(model.blocks[3]).items())
    assert all(t.is_meta for b in model.blocks[:2] for t in _frozen(b).values())
    assert all(p.is_meta for p in model.parameters() if p.requires_grad)  # LoRA, swapped blocks' included
    model.to(META)  # again (accelerate may place twice): no change
    assert {k: t.data_ptr() for k, t in _frozen(model.blocks[3]).items()} == parked
    model.to(torch.float64)  # a cast reaches the host copies (integer buffers stay)
    dtypes = {k: t.dtype for k, t in _frozen(model.blocks[3]).items()}
    assert dtypes["bits"] == torch.int32 and dtypes["norm.weight"] == torch.float64
    assert all(t.device.type == "cpu" for t in _frozen(model.blocks[3]).values())


def test_install_after_park_blocks_reuses_the_parked_copies_and_remove_undoes_everything():
    model, reference = _model(park=2), _model()
    parked = {id(t): t.data_ptr() for b in model.blocks[2:] for t in _frozen(b).values()}
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    assert swap is not None
    assert {id(t): t.data_ptr() for b in model.blocks[2:] for t in _frozen(b).values()} == parked
    swap.remove()
    for block in model.modules():
        assert not block._forward_hooks and not block._forward_pre_hooks
        assert block_swap.swap_state(block) is None and "_apply" not in block.__dict__
    assert block_swap.installed(model) is None
    losses, trained = _train(model)
    ref_losses, ref_trained = _train(reference)
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    assert all(torch.equal(trained[k], ref_trained[k]) for k in trained)


def test_validation_without_grad_leaves_every_block_parked():
    model = _model()
    swap = block_swap.install(model, ("blocks",), 2, "cpu")
    with torch.no_grad():
        model(torch.randn(1, 5, DIM))
    assert swap.resident == {}


def test_the_swapped_frozen_tensors_are_kept_out_of_ddp():
    model = _model()
    model._ddp_params_and_buffers_to_ignore = ["proj_in.base_layer.bias"]  # another lever's (fp8 buffers): kept
    block_swap.install(model, ("blocks",), 1, "cpu")
    ignored = set(model._ddp_params_and_buffers_to_ignore)
    assert "proj_in.base_layer.bias" in ignored
    assert {"blocks.3.norm.weight", "blocks.3.to_q.base_layer.weight", "blocks.3.scale", "blocks.3.bits"} <= ignored
    assert not any(".lora_" in n or n.startswith("blocks.2.") for n in ignored)


def test_frozen_slots_skip_swapped_blocks_on_request():
    model = _model(park=1)
    every = list(block_swap.frozen_slots(model))
    outside = list(block_swap.frozen_slots(model, skip_swapped=True))
    swapped = {id(t) for t in _frozen(model.blocks[3]).values()}
    assert len(every) - len(outside) == len(swapped)
    assert not any(id(t) in swapped for _, _, t in outside)
    assert all(not t.requires_grad for _, _, t in every)


def test_swap_bytes_counts_the_swapped_blocks_on_a_meta_model():
    with torch.device("meta"):
        model = Stack()
    total, largest = block_swap.swap_bytes(model, ("blocks",), 3)
    assert largest == _block_bytes(model.blocks[0]) and total == 3 * largest
    assert block_swap.swap_bytes(model, ("blocks",), 0) == (0, 0)


@pytest.mark.parametrize("count", [DEPTH, DEPTH + 3])
def test_as_many_blocks_as_the_model_has_is_refused(count):
    with pytest.raises(UserError, match=f"--blocks_to_swap {count} asks for .* of the model's {DEPTH} blocks.*"
                       f"at most --blocks_to_swap {DEPTH - 1}"):
        block_swap.install(_model(), ("blocks",), count, "cpu")


def test_a_model_without_the_named_block_list_is_refused():
    with pytest.raises(UserError, match="has none of the block lists its spec names .*transformer_blocks"):
        block_swap.install(_model(), ("transformer_blocks",), 1, "cpu", family="toy")


def test_a_quantized_weight_is_refused_by_name():
    params4bit = type("Params4bit", (nn.Parameter,), {})
    model = _model()
    model.blocks[3].ff.base_layer.weight = params4bit(torch.zeros(2), requires_grad=False)
    with pytest.raises(UserError, match="cannot swap `ff.base_layer.weight` of a Block: it is a Params4bit"):
        block_swap.install(model, ("blocks",), 1, "cpu")


def _cfg(**values) -> TrainConfig:
    return TrainConfig(pretrained_model_name_or_path="unused", train_data_dir="unused", **values)


@pytest.mark.parametrize("values,match", [
    (dict(blocks_to_swap=2, compile="blocks"), "cannot run with --compile blocks"),
    (dict(blocks_to_swap=2, quantize_base="nf4"), "cannot swap a --quantize_base nf4 model"),
    (dict(blocks_to_swap=28), "asks for all of the model's 28 blocks.*at most --blocks_to_swap 27"),
])
def test_check_config_refuses_what_the_swap_cannot_take(values, match):
    with pytest.raises(UserError, match=match):
        block_swap.check_config(_cfg(**values), "sana", ("transformer_blocks",), depth=28)


def test_check_config_refuses_a_family_without_a_block_list_and_passes_the_rest():
    with pytest.raises(UserError, match="the `toy` family names no list of repeated blocks"):
        block_swap.check_config(_cfg(blocks_to_swap=1), "toy", (), depth=None)
    block_swap.check_config(_cfg(blocks_to_swap=0, compile="blocks"), "toy", (), depth=None)  # off: nothing to say
    block_swap.check_config(_cfg(blocks_to_swap=27), "sana", ("transformer_blocks",), depth=28)
    block_swap.check_config(_cfg(blocks_to_swap=99), "sana", ("transformer_blocks",), depth=None)  # at install


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
    swapped = {n: {k: t.data_ptr() for k, t in _frozen(e.blocks[2]).items()} for n, e in (("high", high), ("low", low))}
    experts = WanExperts(high, low, offload=True)
    experts.place(META)
    assert experts.residency() == {"high": "meta", "low": "cpu"}
    for name in ("low", "high", "low"):
        experts.activate(name)
        for expert_name, expert in (("high", high), ("low", low)):
            assert {k: t.data_ptr() for k, t in _frozen(expert.blocks[2]).items()} == swapped[expert_name]
        assert all(t.is_meta for t in _frozen(experts.expert(name).blocks[1]).values())
    ids = {id(t) for e in (high, low) for t in _frozen(e.blocks[2]).values()}
    assert not any(i in ids for kept in experts._host.values() for i in kept)  # WanExperts keeps no copy of them
    paths = ("blocks", "high.blocks", "low.blocks")  # the Wan family's names
    assert [len(b) for b in block_swap.block_lists(experts, paths)] == [3, 3]


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
        model = _model(checkpointing, depth, dim, park=swapped, device="cuda")
        model.to("cuda")
        swap = block_swap.install(model, ("blocks",), swapped, "cuda")
        if swap is not None:
            assert all(t.is_pinned() for b in model.blocks[depth - count:] for t in _frozen(b).values())
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
                            torch.cuda.max_memory_allocated(), _block_bytes(model.blocks[0]))
        if swap is not None:
            assert swap.resident == {}
            assert all(t.device.type == "cpu" for b in model.blocks[depth - count:] for t in _frozen(b).values())
        del model, opt
    torch.testing.assert_close(results[count][0], results[0][0], rtol=1e-4, atol=1e-5)
    for a, b in zip(results[count][1], results[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert results[0][2] - results[count][2] >= (count - 3) * results[0][3]


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
    reference = _train(_two_lists(checkpointing))
    model = _two_lists(checkpointing)
    paths = ("blocks", "singles")
    with pytest.raises(UserError, match="at most --blocks_to_swap 5"):
        block_swap.swapped_blocks(model, paths, 6)
    swap = block_swap.install(model, paths, 3, "cpu")  # 3 of the 6 singles, 1 of the 2 blocks
    assert [[s.module for s in states] for states in swap.lists] == [[model.blocks[1]], list(model.singles[3:])]
    losses, trained = _train(model)
    assert all(torch.equal(a, b) for a, b in zip(losses, reference[0]))
    assert all(torch.equal(trained[k], reference[1][k]) for k in trained)
    assert swap.stats.copies > 0
