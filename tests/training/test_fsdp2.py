"""FSDP2's pieces on one process (a gloo group of one): the refusals, accelerate kept out of the sharding, the
sharding of each block then the root, clipping of sharded gradients and the gathered weights. The two-process runs
are tests/e2e/test_fsdp2.py."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from dit_lora.core.errors import UserError
from dit_lora.training import fsdp2


@pytest.fixture
def group():
    """A gloo process group of one process, torn down after the test."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class Block(nn.Module):
    """A frozen bf16 linear with an fp32 LoRA-like pair beside it (mixed dtypes in one FSDP group)."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(8, 8).to(torch.bfloat16).requires_grad_(False)
        self.down, self.up = nn.Linear(8, 2, bias=False), nn.Linear(2, 8, bias=False)

    def forward(self, x):
        return self.base(x.to(torch.bfloat16)).float() + self.up(self.down(x))


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(8, 1)
        self.register_buffer("scale", torch.ones(4, dtype=torch.uint8))  # stays whole, like fp8_scaled's buffers

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _cfg(**overrides):
    from dit_lora.config import TrainConfig

    return TrainConfig(family="sana", pretrained_model_name_or_path="m", output_dir="o", **overrides)


def test_options_fsdp2_does_not_combine_with_are_refused_in_one_paragraph():
    fsdp2.check_options(_cfg())  # the defaults combine
    fsdp2.check_options(_cfg(quantize_base="fp8_scaled"))  # its buffers stay whole
    with pytest.raises(UserError) as err:
        fsdp2.check_options(_cfg(blocks_to_swap=2, quantize_base="nf4", compile="blocks", mixed_precision="fp16"))
    text = str(err.value)
    assert "fsdp2.yaml" in text and "multi_gpu.yaml" in text and "\n" not in text
    for flag in ("--blocks_to_swap 2", "--quantize_base nf4", "--compile blocks", "--mixed_precision fp16"):
        assert flag in text



@pytest.mark.parametrize("name", ["prodigy", "adafactor", "came", "adamw8bit", "adamw4bit"])
def test_the_device_side_optimizers_are_refused_under_fsdp2(name):
    """Prodigy's estimate and Adafactor's and CAME's factored moments reduce over whole tensors, torchao's AdamW keeps
    its quantized moments as plain tensors per parameter: not verified on shards."""
    with pytest.raises(UserError, match=f"--optimizer {name} .*use adamw"):
        fsdp2.check_options(_cfg(optimizer=name))


def test_accelerate_builds_no_fsdp_state_of_its_own(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with fsdp2.accelerate_sees_no_fsdp():
        assert "ACCELERATE_USE_FSDP" not in os.environ
    assert os.environ["ACCELERATE_USE_FSDP"] == "true"


def test_blocks_then_root_are_sharded_and_step_like_the_unsharded_model(group):
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    plain, model = Toy(), Toy()
    model.load_state_dict(plain.state_dict())
    sharded = fsdp2.shard(model, ("blocks", "missing"), torch.device("cpu"), train_backbone=False)
    counts = sharded.counts
    assert counts.blocks == 3 and counts.buffers == 1 and counts.trainable == 3 * 2 + 2
    assert all(isinstance(p, DTensor) for p in model.parameters())
    assert model.blocks[0].base.weight.dtype == torch.bfloat16 and model.blocks[0].down.weight.dtype == torch.float32
    assert not isinstance(model.scale, DTensor)
    line = fsdp2.describe(counts, 1, sharded.sync_each_micro_batch)
    assert "3 transformer block(s)" in line and "last micro-batch" in line and "stay whole" in line

    x = torch.randn(4, 8)
    plain(x).square().sum().backward()
    sharded.set_gradient_sync(True)
    model(x).square().sum().backward()
    expected = torch.nn.utils.clip_grad_norm_([p for p in plain.parameters() if p.grad is not None], 0.5)
    norm = sharded.clip(0.5)
    assert not isinstance(norm, DTensor) and torch.allclose(norm, expected)
    full = sharded.full_trainables()
    for name, p in plain.named_parameters():
        if p.requires_grad:
            assert torch.equal(full[name], p.detach())
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters() if p.grad is not None}
    for name, p in plain.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[name], p.grad)


def test_a_backbone_run_reduces_at_every_micro_batch(group):
    sharded = fsdp2.shard(Toy(), ("blocks",), torch.device("cpu"), train_backbone=True)
    assert sharded.sync_each_micro_batch
    assert "every micro-batch" in fsdp2.describe(sharded.counts, 2, True)


def test_clipping_sharded_gradients_takes_no_host_sync(group):
    """The norm is all-reduced and the gradients scaled on the device: the sync audit (DIT_LORA_SYNC_DEBUG) sees no
    host read in clip, as the two-process run under the audit shows for whole steps (tests/e2e/test_fsdp2.py)."""
    from dit_lora.training.sync_audit import HostSyncError, SyncAudit

    model = Toy()
    sharded = fsdp2.shard(model, ("blocks",), torch.device("cpu"), train_backbone=False)
    model(torch.randn(4, 8)).sum().backward()
    audit = SyncAudit(torch.device("cpu"), True)
    with audit.step():
        norm = sharded.clip(0.5)
    with pytest.raises(HostSyncError), audit.step():
        float(norm)  # the audit is on: a host read of the norm is refused


def test_the_guards_snapshot_and_rollback_work_on_shards(group):
    """take_snapshot clones the local shards (DTensors) of the weights and of Adam's state; roll_back restores them."""
    from torch.distributed.tensor import DTensor

    from dit_lora.training.guard import StepGuard

    model = Toy()
    sharded = fsdp2.shard(model, ("blocks",), torch.device("cpu"), train_backbone=False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2, fused=True)
    guard = StepGuard(optimizer, [lambda k: 1.0], 10, torch.device("cpu"), enabled=True, fused=True, interval=1,
                      max_consecutive_skips=1, rollback_lr_factor=0.5, max_rollbacks=2, spike_sigma=None, world_size=1)

    def step():
        model(torch.randn(4, 8)).square().sum().backward()
        guard.step(optimizer, optimizer, torch.ones(()), sharded.clip(1.0), 0)
        optimizer.zero_grad(set_to_none=True)

    step()
    guard.take_snapshot(model, 1)
    kept = {n: p.detach().full_tensor().clone() for n, p in model.named_parameters() if p.requires_grad}
    moments = {id(p): optimizer.state[p]["exp_avg"].full_tensor().clone() for p in params}
    step()
    assert any(not torch.equal(p.detach().full_tensor(), kept[n]) for n, p in model.named_parameters() if n in kept)
    guard.roll_back(model, 2)
    for name, p in model.named_parameters():
        if name in kept:
            assert isinstance(p, DTensor) and torch.equal(p.detach().full_tensor(), kept[name])
    assert all(torch.equal(optimizer.state[p]["exp_avg"].full_tensor(), moments[id(p)]) for p in params)


@pytest.fixture
def fsdp2_launch(monkeypatch):
    """The environment `dit-lora launch --config_file accelerate_configs/fsdp2.yaml` gives each process."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")


def _loaded(parks: bool) -> Toy:
    """A Toy as a family's loader leaves it (frozen, its blocks parked by the loaders' own park_blocks call with
    --blocks_to_swap 0, moved to the device), then LoRA-like weights trained: each block's down/up pair."""
    from dit_lora.modeling import block_swap

    torch.manual_seed(0)
    model = Toy().requires_grad_(False)
    assert block_swap.park_blocks(model, ("blocks",), 0, "cpu") == (3 if parks else 0)
    model.to("cpu")
    for block in model.blocks:
        block.down.requires_grad_(True)
        block.up.requires_grad_(True)
    return model


def test_under_fsdp2_the_loader_parks_every_block_and_sharding_brings_them_in_one_at_a_time(
    group, fsdp2_launch, monkeypatch
):
    """Every block waits in host memory from the load (the loaders' park_blocks call, with no --blocks_to_swap);
    shard_model brings one block at a time: when fully_shard takes a block, no other block is whole (unparked and
    not yet sharded), and the root finds none. Afterwards nothing of the parking is left."""
    import torch.distributed.fsdp as fsdp_module
    from torch.distributed.tensor import DTensor

    from dit_lora.modeling import block_swap, host_parking

    model = _loaded(parks=True)
    assert all(host_parking.swap_state(b) is not None and "_apply" in b.__dict__ for b in model.blocks)
    assert all(not t.is_pinned() for b in model.blocks for t in b.parameters())  # one synchronous copy each

    def whole(block: nn.Module) -> bool:
        return host_parking.swap_state(block) is None and not isinstance(block.base.weight, DTensor)

    seen, original = [], fsdp_module.fully_shard

    def counting(module, **kwargs):
        seen.append((module is model, sum(whole(b) for b in model.blocks)))
        return original(module, **kwargs)

    monkeypatch.setattr(fsdp_module, "fully_shard", counting)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")  # DDP: only --blocks_to_swap's blocks are parked
    plain = _loaded(parks=False)
    assert block_swap.park_blocks(Toy(), ("blocks",), 1, "cpu") == 1
    counts = fsdp2.shard_model(model, ("blocks",), torch.device("cpu"))
    assert seen == [(False, 1), (False, 1), (False, 1), (True, 0)]
    assert counts.from_host == 3 and "3 of them brought from host memory one at a time" in fsdp2.describe(
        counts, 1, False)
    assert all(host_parking.swap_state(b) is None and "_apply" not in b.__dict__ for b in model.blocks)
    assert all(isinstance(p, DTensor) for p in model.parameters()) and counts.trainable == 3 * 2
    x = torch.randn(4, 8)
    plain(x).square().sum().backward()
    model(x).square().sum().backward()
    for name, p in plain.named_parameters():
        if p.grad is not None:
            assert torch.equal(dict(model.named_parameters())[name].grad.full_tensor(), p.grad)


def test_brought_in_puts_a_modules_tensors_on_the_device_and_back():
    """The attention canary's placement under FSDP2: the module tested comes to the device (here the meta device,
    a stand-in), the same tensor objects point at their host data again afterwards."""
    layer = nn.Linear(4, 4).requires_grad_(False)
    weight, data = layer.weight, layer.weight.detach().clone()
    with fsdp2.brought_in(layer, torch.device("meta")):
        assert layer.weight is weight and weight.is_meta and layer.bias.is_meta
    assert layer.weight is weight and weight.device.type == "cpu" and torch.equal(weight, data)


#: One process of the GPU test (a subprocess: the test modules are imported by path, so no spawn could pickle a
#: function of theirs): a model of 8 large bf16 blocks loaded as under FSDP2, then sharded; prints its figures.
_SHARDING_PEAK = """
import json, os, sys
import torch, torch.distributed as dist
from torch import nn
from dit_lora.modeling import block_swap
from dit_lora.training import fsdp2
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.cuda.set_device(rank)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
device, dim = torch.device("cuda", rank), 2048  # 8 MiB per bf16 weight: far above the allocator's rounding
model = nn.Sequential(nn.Linear(dim, dim), nn.ModuleList([nn.Linear(dim, dim) for _ in range(8)]))
model.to(torch.bfloat16).requires_grad_(False)
whole = sum(p.numel() * p.element_size() for p in model.parameters())
block = sum(p.numel() * p.element_size() for p in model[1][0].parameters())
assert block_swap.park_blocks(model, ("1",), 0, device) == 8
torch.cuda.reset_peak_memory_stats(device)
model.to(device)
loaded = torch.cuda.memory_allocated(device)
fsdp2.shard_model(model, ("1",), device)
torch.cuda.synchronize(device)
print(json.dumps([whole, block, loaded, torch.cuda.max_memory_allocated(device)]))
dist.destroy_process_group()
"""


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_on_gpus_setup_never_holds_the_whole_model_on_a_device():
    """Under FSDP2 each GPU holds, after the load, the non-block weights only, and while sharding at most its shards
    so far plus one block whole: below the whole model's bytes."""
    import json
    import subprocess
    import sys

    from helpers import free_port

    world, port = 2, str(free_port())
    env = {**os.environ, "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}
    procs = [subprocess.Popen([sys.executable, "-c", _SHARDING_PEAK, str(rank), str(world), port], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(world)]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        whole, block, loaded, peak = json.loads(stdout.strip().splitlines()[-1])
        assert loaded <= whole - 8 * block + 2**20  # the first Linear, the one weight outside the blocks
        assert peak <= loaded + 8 * block // world + block + 2**20 < whole


class CallsBlockZeroAgain(Toy):
    """As diffusers' DiT calls ``transformer_blocks[0].norm1.emb`` after the blocks: a block's module run by the root."""

    def forward(self, x):
        return super().forward(x) + self.blocks[0].up(self.blocks[0].down(x)).sum(-1, keepdim=True)


def test_a_module_the_root_also_calls_is_a_unit_of_its_own(group):
    """Inside its block's unit, a module the root calls meets its sharded weights there (the DiT failure); named in
    ``FamilyInfo.fsdp_shared_modules``, it is gathered wherever it runs, and the model steps like the unsharded one."""
    from torch.distributed.fsdp import FSDPModule

    torch.manual_seed(0)
    plain = CallsBlockZeroAgain()
    x = torch.randn(4, 8)
    broken = CallsBlockZeroAgain()
    broken.load_state_dict(plain.state_dict())
    fsdp2.shard(broken, ("blocks",), torch.device("cpu"), train_backbone=False)
    with pytest.raises(RuntimeError, match="DTensor"):
        broken(x)
    model = CallsBlockZeroAgain()
    model.load_state_dict(plain.state_dict())
    shared = ("blocks.0.up", "blocks.0.down", "not.in.this.model")
    sharded = fsdp2.shard(model, ("blocks",), torch.device("cpu"), train_backbone=False, shared=shared)
    assert isinstance(model.blocks[0].up, FSDPModule) and not isinstance(model.blocks[1].up, FSDPModule)
    plain(x).square().sum().backward()
    sharded.set_gradient_sync(True)
    model(x).square().sum().backward()
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters() if p.grad is not None}
    for name, p in plain.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[name], p.grad)
