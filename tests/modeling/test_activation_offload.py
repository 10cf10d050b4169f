"""modeling/activation_offload.py: the activations a forward saves wait in host memory until the backward.

On the CPU the "host copies" are copies into fresh CPU memory and the streams are no-ops, so the CUDA code path runs
here: training with it is bitwise training without it (no checkpointing, torch's non-reentrant checkpoint as the
families use it, the reentrant one; with the block swap's hooks chained above), the device tensors are dropped once
copied (at most FORWARD_IN_FLIGHT kept), weights (an fp8_scaled base's buffers too) and small tensors stay, a tensor
saved twice is copied once, nothing happens without grad, and every copy's event is waited for before its tensor is
used or dropped. The CUDA test (streams, pinned memory, a lower peak) is marked ``gpu``.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.modeling import activation_offload, block_swap
from dit_lora.modeling.activation_offload import FORWARD_IN_FLIGHT, PREFETCH, ActivationOffload

DIM, DEPTH, TOKENS = 32, 4, 64


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x)))) * text.mean(0)


class Stack(nn.Module):
    """The blocks (the family's block list is ``body.blocks``) run by this module's forward; ``mode``: the
    checkpointing."""

    def __init__(self, mode: str, depth: int = DEPTH) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.mode = mode
        self.outputs: list[weakref.ref] = []  # each block's output, weakly (what the forward still holds)

    def forward(self, x: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            if self.mode == "off":
                x = block(x, text)
            else:
                x = checkpoint(block, x, text, use_reentrant=self.mode == "reentrant")
            self.outputs.append(weakref.ref(x))
        return x


class Net(nn.Module):
    """The blocks' owner and a head after it."""

    def __init__(self, mode: str = "off", depth: int = DEPTH) -> None:
        super().__init__()
        self.body = Stack(mode, depth)
        self.head = nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x, text))


def _net(mode: str = "off", depth: int = DEPTH) -> Net:
    torch.manual_seed(0)
    net = Net(mode, depth)
    net.requires_grad_(False)
    for block in net.body.blocks:  # the trained weights: the second linear of each block and the head
        block.down.weight.requires_grad_(True)
    net.head.weight.requires_grad_(True)
    return net


def _train(net: Net, steps: int = 3) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    x, text = torch.randn(2, TOKENS, DIM, generator=g), torch.randn(8, DIM, generator=g)
    x.requires_grad_(True)  # the reentrant checkpoint needs an input that requires grad (as the families arrange)
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = net(x, text).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, [p.detach().clone() for p in net.parameters()]


def _equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1]))


@pytest.mark.parametrize("mode", ["off", "non-reentrant", "reentrant"])
def test_training_with_offloading_is_bitwise_training_without_it(mode):
    plain = _train(_net(mode))
    net = _net(mode)
    offload = activation_offload.install(net, ["body.blocks"], True, "cpu")
    assert offload is not None and activation_offload.installed(net) is offload
    assert _equal(_train(net), plain)
    assert offload.stats.offloaded > 0 and offload.stats.fetched > 0
    assert offload.pending == [] and not offload.in_flight  # the backward's end dropped the step's copies


@pytest.mark.parametrize("mode", ["off", "non-reentrant"])
def test_with_swapped_blocks_the_two_levers_chain_and_change_nothing(mode):
    """Only the innermost saved-tensor hooks run: the swap's rebuild its weights, the rest reach the offloading."""
    plain = _train(_net(mode))
    alone = _net(mode)
    offload_alone = activation_offload.install(alone, ["body.blocks"], True, "cpu")
    _train(alone)
    net = _net(mode)
    swap = block_swap.install(net, ["body.blocks"], 2, "cpu")
    offload = activation_offload.install(net, ["body.blocks"], True, "cpu")
    assert _equal(_train(net), plain)
    assert swap is not None and offload is not None and swap.stats.copies > 0 and swap.resident == {}
    assert offload.stats.offloaded_bytes == offload_alone.stats.offloaded_bytes  # no swapped weight was offloaded


@pytest.mark.parametrize("mode", ["off", "non-reentrant"])
def test_an_fp8_scaled_base_offloads_its_activations_not_its_weights(mode):
    """``--quantize_base fp8_scaled``: its layers' autograd function saves the input (offloaded) and the payload and
    scale buffers (the model's: kept); training is bitwise the same."""
    from dit_lora.modeling.fp8_scaled import convert

    def fp8_net() -> Net:
        net = _net(mode)
        convert(net, [f"body.blocks.{i}.up" for i in range(DEPTH)])
        return net

    plain = _train(fp8_net())
    net, unquantized = fp8_net(), _net(mode)
    offload = activation_offload.install(net, ["body.blocks"], True, "cpu")
    reference = activation_offload.install(unquantized, ["body.blocks"], True, "cpu")
    assert offload is not None and reference is not None
    assert _equal(_train(net), plain)
    _train(unquantized)
    assert offload.stats.offloaded == reference.stats.offloaded > 0  # the same activations, no fp8 buffer


def test_the_offloaded_activations_leave_the_device_during_the_forward():
    """Without offloading every block's output lives until the backward; with it, only the copies in flight."""
    for enabled, alive in ((False, DEPTH), (True, FORWARD_IN_FLIGHT)):
        net = _net("off")
        activation_offload.install(net, ["body.blocks"], enabled, "cpu")
        loss = net(torch.randn(2, TOKENS, DIM), torch.randn(8, DIM)).pow(2).mean()
        gc.collect()
        assert sum(ref() is not None for ref in net.body.outputs) <= alive
        if not enabled:
            assert all(ref() is not None for ref in net.body.outputs)
        loss.backward()


def test_the_blocks_owner_is_hooked_and_the_head_after_it_is_not():
    net = _net("off")
    assert activation_offload.owners(net, ["body.blocks"]) == [net.body]
    assert activation_offload.owners(net, ["blocks", "missing.blocks"]) == [net]  # none found: the whole model
    offload = activation_offload.install(net, ["body.blocks"], True, "cpu")
    assert offload is not None
    hidden = net.body(torch.randn(2, TOKENS, DIM), torch.randn(8, DIM))
    inside = offload.stats.offloaded
    net.head(hidden).pow(2).mean().backward()  # the head's saved input stays: its forward is not hooked
    assert inside > 0 and offload.stats.offloaded == inside


def test_what_stays_on_the_device():
    offload = ActivationOffload(nn.Linear(DIM, DIM), torch.device("cpu"))
    weight = offload.model.weight
    offload.enter(offload.model, ())
    try:
        big = torch.randn(64, 64)
        assert offload.offloads(big) and offload.offloads(big.t()) and offload.offloads(big[:, :16])
        assert not offload.offloads(torch.randn(8))  # under MIN_OFFLOAD_BYTES
        assert not offload.offloads(weight) and not offload.offloads(weight.t())  # a parameter and its view
        assert not offload.offloads(weight.detach())  # its storage
        assert not offload.offloads(torch.randn(64, 1).expand(64, 64))  # elements that overlap
        assert not offload.offloads(torch.randn(64, 64, requires_grad=True))  # a leaf that trains
        assert not offload.offloads(torch.randn(64, 64, dtype=torch.float16).to_sparse())
    finally:
        offload.exit(offload.model, (), None)
    assert activation_offload.chained() is None


def test_non_overlapping():
    t = torch.randn(4, 6, 8)
    assert activation_offload.non_overlapping(t) and activation_offload.non_overlapping(t.transpose(0, 2))
    assert activation_offload.non_overlapping(t[:, ::2, 1:3])
    assert not activation_offload.non_overlapping(torch.randn(4, 1).expand(4, 3))
    assert not activation_offload.non_overlapping(t.as_strided((4, 4), (1, 1)))


class _SavesASlice(torch.autograd.Function):
    """Saves a strided slice; its backward checks the slice comes back with its own size and strides."""

    @staticmethod
    def forward(ctx, x):
        part = x[:, : DIM // 2]
        ctx.save_for_backward(part)
        ctx.layout = (part.size(), part.stride())
        return part * 2

    @staticmethod
    def backward(ctx, grad):
        (part,) = ctx.saved_tensors
        assert (part.size(), part.stride()) == ctx.layout
        full = torch.zeros(grad.shape[0], DIM)
        full[:, : DIM // 2] = grad * 2 + part * 0
        return full


def test_a_saved_view_comes_back_with_its_strides_and_a_shared_tensor_is_copied_once():
    model = nn.Linear(DIM, DIM)
    offload = activation_offload.install(model, [], True, "cpu")
    assert offload is not None
    x = torch.randn(64, DIM, requires_grad=True)
    offload.enter(model, ())
    try:
        out = _SavesASlice.apply(x * 1.0)
        y = x * 3.0
        both = y * y  # mul saves y twice: one host copy
    finally:
        offload.exit(model, (), None)
    assert offload.stats.shared == 1
    (out.sum() + both.sum()).backward()
    expected = torch.zeros_like(x).index_fill_(1, torch.arange(DIM // 2), 2.0) + 18 * x.detach()
    # an absolute tolerance: where 2 + 18x cancels to about 0, autograd's (y + y) * 3 and 18x differ by an ulp of 36
    # (allclose's default rtol against ~0 failed about one run in fifteen)
    torch.testing.assert_close(x.grad, expected, rtol=1e-6, atol=1e-5)


def test_without_grad_nothing_is_packed_and_an_error_pops_the_hooks():
    net = _net("off")
    offload = activation_offload.install(net, ["body.blocks"], True, "cpu")
    assert offload is not None
    with torch.no_grad():
        net(torch.randn(2, TOKENS, DIM), torch.randn(8, DIM))
    assert offload.stats.offloaded == 0 and offload.stats.kept == 0
    with pytest.raises(RuntimeError):
        net(torch.randn(2, TOKENS, DIM + 1), torch.randn(8, DIM))
    assert activation_offload.chained() is None and offload._contexts == []
    offload.remove()
    assert activation_offload.installed(net) is None
    net(torch.randn(2, TOKENS, DIM), torch.randn(8, DIM)).sum().backward()
    assert offload.stats.offloaded == 0


def test_a_forward_whose_backward_never_ran_is_forgotten_at_the_next_step():
    """A forward without its backward (an error between them) leaves nothing behind: the next step trains alike."""
    plain = _train(_net("off"), steps=1)
    net = _net("off")
    offload = activation_offload.install(net, ["body.blocks"], True, "cpu")
    assert offload is not None
    net(torch.randn(2, TOKENS, DIM), torch.randn(8, DIM)).sum()  # no backward
    assert offload.pending and offload.in_flight
    assert _equal(_train(net, steps=1), plain)
    assert offload.pending == [] and not offload.in_flight


class _RecordingStreams:
    """The CUDA stream calls as tokens: every event recorded after a copy, every event the compute stream waited for,
    and, per event, the tensor a copy wrote (checked when the compute stream waits)."""

    cuda = False

    def __init__(self) -> None:
        self.recorded: list[object] = []
        self.waited: list[object] = []

    def copying(self):
        import contextlib

        return contextlib.nullcontext()

    def record(self) -> object:
        self.recorded.append(object())
        return self.recorded[-1]

    def wait(self, event) -> None:
        if event is not None:
            self.waited.append(event)


@pytest.mark.parametrize("mode", ["off", "non-reentrant"])
def test_the_compute_stream_waits_for_every_copy_before_using_or_dropping_its_tensor(mode):
    """The CUDA bookkeeping, on the CPU: each copy's event (to the host in the forward, back in the backward) is
    waited for by the compute stream exactly once, before its tensor is handed to autograd or its device memory
    dropped; a step leaves no copy unwaited."""
    net = _net(mode)
    offload = activation_offload.install(net, ["body.blocks"], True, "cpu")
    assert offload is not None
    streams = _RecordingStreams()
    offload.streams = streams  # type: ignore[assignment]
    unpack = offload.unpack

    def checked(saved):
        out = unpack(saved)
        if isinstance(saved, activation_offload._Offloaded):
            assert saved.ready is None  # waited for before autograd reads it
        return out

    offload.unpack = checked  # type: ignore[method-assign]
    _train(net, steps=2)
    assert streams.recorded and len(streams.waited) == len(set(map(id, streams.waited)))
    assert {id(e) for e in streams.recorded} == {id(e) for e in streams.waited}
    assert all(entry.original is None for entry in offload.pending)


def test_a_tensor_saved_for_a_node_that_never_runs_does_not_hold_the_prefetch_window():
    """A branch the loss does not use, saved between two chains: its tensor is fetched ahead, then passed over and
    dropped, and the window holds PREFETCH tensors again."""
    model = nn.Linear(DIM, DIM)
    offload = activation_offload.install(model, [], True, "cpu")
    assert offload is not None
    x = torch.randn(64, DIM, requires_grad=True)
    before, after = activation_offload.PASSED_OVER + 4, 6
    offload.enter(model, ())
    try:
        chain = x * 2.0
        for _ in range(before):  # each sin saves its input: indices 0 .. before - 1
            chain = chain.sin()
        unused = (x * 3.0).exp()  # exp saves its result (index ``before``): never unpacked
        for _ in range(after):
            chain = chain.sin()
    finally:
        offload.exit(model, (), None)
    windows = []
    prefetch = offload._prefetch_before

    def watched(entry):
        prefetch(entry)
        windows.append(sorted(e.index for e in offload.ahead))

    offload._prefetch_before = watched  # type: ignore[method-assign]
    chain.sum().backward()
    assert any(before in w for w in windows)  # fetched ahead once the backward came near it
    assert windows[-3:] and all(len(w) <= activation_offload.PREFETCH and before not in w for w in windows[-3:])
    assert unused.grad_fn is not None and offload.pending == []
    assert torch.allclose(x.grad, _sin_chain_grad(x.detach() * 2.0, before + after) * 2.0)


def _sin_chain_grad(start: torch.Tensor, depth: int) -> torch.Tensor:
    value, grad = start, torch.ones_like(start)
    for _ in range(depth):
        grad = grad * value.cos()
        value = value.sin()
    return grad


def test_disabled_installs_nothing_and_compile_is_refused():
    assert activation_offload.install(nn.Linear(2, 2), [], False, "cpu") is None
    activation_offload.check_config(TrainConfig.for_family("sana", activation_offloading=True).performance)
    with pytest.raises(UserError, match="--activation_offloading cannot run with --compile blocks"):
        activation_offload.check_config(TrainConfig.for_family("sana", activation_offloading=True, compile="blocks").performance)


def test_the_log_line_says_what_and_where():
    offload = ActivationOffload(nn.Linear(2, 2), torch.device("cpu"))
    line = offload.describe(expected_bytes=3 * 2**30)
    assert "at least 1024 bytes" in line and "the host is the device" in line and "3.00 GiB of host memory" in line


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["off", "non-reentrant"])
def test_on_cuda_offloading_lowers_the_peak_and_trains_alike(mode):
    """Pinned host copies on a side stream: the same gradients, a lower peak of allocated memory, no host sync in
    the forward and backward (the sync audit, CUDA's sync debug mode included)."""
    from dit_lora.training.sync_audit import SyncAudit

    g = torch.Generator().manual_seed(1)
    x, text = torch.randn(2, 4096, DIM, generator=g).cuda(), torch.randn(8, DIM, generator=g).cuda()
    # Deep enough that offloading can lower the backward's peak under checkpointing: there only the blocks' inputs
    # are saved, FORWARD_IN_FLIGHT of them stay on the device at the forward's end and PREFETCH more come back
    # ahead, so with 4 blocks (the first GPU run, 2026-11-26) all 4 were on the device at that peak either way.
    depth = FORWARD_IN_FLIGHT + PREFETCH + 8
    grads, peaks = {}, {}
    for enabled in (False, True):
        net = _net(mode, depth).cuda()
        offload = activation_offload.install(net, ["body.blocks"], enabled, "cuda")
        net(x, text).pow(2).mean().backward()  # warm-up: the allocators' caches
        net.zero_grad()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with SyncAudit(torch.device("cuda"), enabled=True).step():
            loss = net(x, text).pow(2).mean()
            if offload is not None:
                assert offload.streams.side is not None and offload.pending
                assert all(entry.host.is_pinned() for entry in offload.pending)
            loss.backward()
        torch.cuda.synchronize()
        peaks[enabled] = torch.cuda.max_memory_allocated()
        grads[enabled] = [p.grad.clone() for p in net.parameters() if p.requires_grad]
        if offload is not None:
            assert offload.stats.offloaded > 0 and offload.stats.fetched > 0 and offload.pending == []
    assert all(torch.equal(a, b) for a, b in zip(grads[True], grads[False]))
    assert peaks[True] + x.nbytes <= peaks[False], peaks  # at least one block input fewer on the device
