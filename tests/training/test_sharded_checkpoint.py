"""FSDP2's sharded state through torch.distributed.checkpoint, on one process (a gloo group of one): weights,
optimizer state and the guard's snapshot come back exactly; a checkpoint without them, or of other trainables, is
refused in one paragraph."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dit_lora.core.errors import UserError
from dit_lora.training import fsdp2, sharded_checkpoint
from dit_lora.training.guard import StepGuard


@pytest.fixture
def group():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model(seed: int, rank: int = 2) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, rank, bias=False), nn.Linear(rank, 1))
    model[0].requires_grad_(False)  # the frozen base: never written
    fsdp2.shard_model(model, (), torch.device("cpu"))
    return model


def _trained(seed: int):
    model = _model(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    guard = StepGuard(optimizer, [lambda k: 1.0], 10, torch.device("cpu"), enabled=True, fused=False, interval=1,
                      max_consecutive_skips=3, rollback_lr_factor=0.5, max_rollbacks=1, spike_sigma=None, world_size=1)
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    guard.take_snapshot(model, 1)
    return model, optimizer, guard


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def test_the_sharded_state_comes_back_exactly(group, tmp_path):
    model, optimizer, guard = _trained(0)
    state = sharded_checkpoint.state_to_save(model, optimizer, guard)
    assert not any(key.startswith("model/0.") for key in state)  # the frozen base is not written
    assert {"model/1.weight", "optim/1.weight/exp_avg", "optim/1.weight/step", "snapshot/param/1.weight",
            "snapshot/applied"} <= state.keys()
    sharded_checkpoint.save_sharded(tmp_path, model, optimizer, guard)

    fresh, fresh_opt, fresh_guard = _trained(1)  # other values everywhere
    sharded_checkpoint.load_sharded(tmp_path, fresh, fresh_opt, fresh_guard)
    for (name, a), b in zip(model.named_parameters(), fresh.parameters()):
        if a.requires_grad:
            assert torch.equal(_local(a), _local(b)), name
    for a, b in zip(optimizer.param_groups[0]["params"], fresh_opt.param_groups[0]["params"]):
        for field, value in optimizer.state[a].items():
            assert torch.equal(_local(value), _local(fresh_opt.state[b][field])), field
    saved, loaded = guard.snapshot_tensors(model, to_cpu=False), fresh_guard.snapshot_tensors(fresh, to_cpu=False)
    assert saved.keys() == loaded.keys() and all(torch.equal(_local(saved[k]), _local(loaded[k])) for k in saved)


def test_a_checkpoint_without_shards_or_of_other_trainables_is_refused(group, tmp_path):
    model, optimizer, guard = _trained(0)
    with pytest.raises(UserError, match="holds no sharded_state/.*without FSDP2"):
        sharded_checkpoint.load_sharded(tmp_path, model, optimizer, guard)
    sharded_checkpoint.save_sharded(tmp_path, model, optimizer, guard)
    other = _model(0, rank=4)
    params = [p for p in other.parameters() if p.requires_grad]
    with pytest.raises(UserError, match=r"builds 1.weight as \(4, 8\), the checkpoint holds \(2, 8\)"):
        sharded_checkpoint.load_sharded(tmp_path, other, torch.optim.AdamW(params), guard)
