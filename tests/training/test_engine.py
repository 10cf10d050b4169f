"""training/engine.py: the engine object the stages ask (DDP, FSDP2), instead of asking which engine it is."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dit_lora.core.engine import EngineChoice
from dit_lora.core.errors import UserError
from dit_lora.training.engine import DDPEngine, FSDP2Engine, make_engine

TRAINING = Path(__file__).resolve().parents[2] / "dit_lora" / "training"


def _engine(name: str, accelerator=None):
    engine = make_engine(EngineChoice(name, ("the launch asks for it",)))
    engine.accelerator = accelerator
    return engine


def test_the_launch_s_choice_makes_its_engine():
    ddp, fsdp = _engine("ddp"), _engine("fsdp2")
    assert type(ddp) is DDPEngine and type(fsdp) is FSDP2Engine
    assert (ddp.sharded, ddp.replays, ddp.samples_on_every_rank) == (False, True, False)
    assert (fsdp.sharded, fsdp.replays, fsdp.samples_on_every_rank) == (True, False, True)
    assert ddp.start_note() is None and fsdp.start_note() == "engine: FSDP2 (the launch asks for it)"


def test_each_engine_refuses_what_it_does_not_combine_with():
    from dit_lora.config import TrainConfig

    cfg = TrainConfig(family="sana", pretrained_model_name_or_path="m", output_dir="o", use_ema=True)
    _engine("ddp").check_options(cfg)
    with pytest.raises(UserError, match="does not combine with --use_ema"):
        _engine("fsdp2").check_options(cfg)


def test_ddp_clips_through_the_accelerator_and_unscales_fp16_without_clipping():
    model = torch.nn.Linear(3, 1)  # 4 parameters
    for p in model.parameters():
        p.grad = torch.full_like(p, 2.0)
    calls = []
    accelerator = SimpleNamespace(clip_grad_norm_=lambda params, norm: calls.append(("clip", len(params), norm)) or 9.0,
                                  scaler=None, unscale_gradients=lambda: calls.append(("unscale",)))
    engine = _engine("ddp", accelerator)
    assert engine.clip(model, 1.0) == 9.0 and calls == [("clip", 2, 1.0)]
    calls.clear()
    assert torch.isclose(engine.clip(model, 0.0), torch.tensor(4.0))  # sqrt(4 * 2^2), nothing clipped
    assert calls == []
    accelerator.scaler = object()
    engine.clip(model, 0.0)
    assert calls == [("unscale",)]


def test_ddp_reports_accelerate_s_type_and_moves_the_model_off_for_the_final_samples():
    from accelerate.utils import DistributedType

    engine = _engine("ddp", SimpleNamespace(distributed_type=DistributedType.NO))
    assert engine.summary_name() == "NO" and _engine("fsdp2").summary_name() == "FSDP2"
    moved = []
    engine.release_for_samples(SimpleNamespace(to=moved.append))
    assert moved == ["cpu"]
    _engine("fsdp2").release_for_samples(SimpleNamespace(to=lambda *a: pytest.fail("a sharded model stays")))


@pytest.fixture
def group():
    """A gloo process group of one process, torn down after the test."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class _Toy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_fsdp2_shards_before_the_groups_and_does_the_step_s_part(group):
    """Sharded at the build stage (the optimizer then holds DTensors), the sync set per micro-batch, the gradients
    clipped sharded, the weights gathered whole for the export."""
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    model = _Toy()
    whole = {n: p.detach().clone() for n, p in model.named_parameters()}
    lines: list[str] = []
    engine = _engine("fsdp2", SimpleNamespace(device=torch.device("cpu"), num_processes=1))
    info = SimpleNamespace(block_lists=("blocks",), fsdp_shared_modules=())
    engine.shard(model, info, train_backbone=False, log=lines.append)
    assert lines[0].startswith("FSDP2: 2 transformer block(s) and the root sharded over 1 process(es)")
    assert all(isinstance(p, DTensor) for p in model.parameters())
    engine.before_wrap(model)  # nothing for DDP to ignore
    engine.set_gradient_sync(True)
    model(torch.ones(2, 4)).sum().backward()
    norm = engine.clip(model, 0.0)
    assert not isinstance(norm, DTensor) and float(norm) > 0
    assert engine.full_trainables().keys() == whole.keys()
    assert all(torch.equal(engine.full_trainables()[n], whole[n]) for n in whole)  # no step taken yet
    engine.after_evaluation(model)  # frees what forwards gathered: local, nothing raised


def test_the_stages_never_ask_which_engine_they_run_on():
    """The loop, setup, finish, the held-out loss, the levers and the checkpoints call the engine object: no branch
    on its kind (``run.sharded is None``, ``engine == "fsdp2"``, ``isinstance(engine, ...)``) outside engine.py."""
    kind = re.compile(r"\.sharded is|\.sharded\.|engine(\.name)? *[!=]= *\"|\"fsdp2\" *[!=]=|isinstance\([^)]*Engine")
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(TRAINING.glob("*.py"))
        if path.name not in ("engine.py", "fsdp2.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if kind.search(line)
    ]
    assert not found, found
