"""``--blocks_to_swap`` end to end on the tiny Sana (two blocks: the last one swapped): a run with it is bitwise a run
without it, with gradient checkpointing off and on (the same loss history, the same adapter file bytes), and a run
killed mid-step resumes to the same bytes (the swap holds no state a checkpoint carries). The video LLMs train with it
in tests/e2e/test_videollm.py (the reload test and a fault drill); modeling/block_swap.py's own tests cover the
reentrant checkpoint and the parking."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from helpers import base_args, read_summary, run_recipe

ADAPTER = "pytorch_lora_weights.safetensors"
#: short fp32 runs (bf16 matmuls are slow on a CPU and not the point), a checkpoint at step 2 for the resume
OPTIONS = dict(resolution=32, train_batch_size=2, max_train_steps=4, checkpointing_steps=2, mixed_precision="no",
               attention_canary="false")

pytestmark = pytest.mark.xdist_group("block-swap")  # the runs share the reference fixture and the latent cache


def _file(out: Path) -> tuple[dict, bytes]:
    """The adapter file as (its header, the bytes after it). safetensors writes the header's metadata from a Rust
    HashMap, whose key order changes from one save to the next, so the header is compared as JSON; the tensors'
    bytes (names, dtypes, shapes, offsets in the header; the data after it) must be identical."""
    raw = (out / ADAPTER).read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


def _train(model: Path, data: Path, out: Path, cache: Path, **overrides) -> dict:
    """One run in this process (no interpreter start-up); its summary."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    AcceleratorState._reset_state(True)
    try:
        return train(parse_config(base_args(model, data, out, cache, **{**OPTIONS, **overrides})))
    finally:
        AcceleratorState._reset_state(True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_sana, shapes_data):
    """``run(checkpointing, blocks_to_swap)``: the output folder of that run, made the first time it is asked for."""
    from dit_lora.modeling.block_swap import BlockSwap

    root = tmp_path_factory.mktemp("block-swap")
    done: dict[tuple[str, int], Path] = {}

    def run(checkpointing: str, blocks: int) -> Path:
        if (checkpointing, blocks) not in done:
            out = root / f"gc-{checkpointing}-swap-{blocks}"
            brought: list[str] = []
            bring = BlockSwap._bring
            with pytest.MonkeyPatch.context() as patch:  # count the copies: the swap must really have run
                patch.setattr(BlockSwap, "_bring", lambda self, state: (brought.append("x"), bring(self, state))[1])
                summary = _train(tiny_sana, shapes_data, out, root / "cache", gradient_checkpointing=checkpointing,
                                 blocks_to_swap=blocks)
            assert summary["status"] == "completed" and summary["steps"] == 4, summary["status"]
            assert bool(brought) == bool(blocks)
            done[checkpointing, blocks] = out
        return done[checkpointing, blocks]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", ["false", "true"])
def test_a_run_with_swapped_blocks_is_bitwise_the_run_without(runs, checkpointing):
    plain, swapped = runs(checkpointing, 0), runs(checkpointing, 1)
    assert read_summary(swapped)["loss_history"] == read_summary(plain)["loss_history"]
    assert _file(swapped) == _file(plain)
    assert read_summary(swapped)["gradient_checkpointing"] is (checkpointing == "true")


@pytest.mark.slow
def test_a_killed_run_with_swapped_blocks_resumes_to_the_same_bytes(runs, tiny_sana, shapes_data, tmp_path):
    reference = runs("true", 0)
    out, cache = tmp_path / "killed", reference.parent / "cache"
    args = base_args(tiny_sana, shapes_data, out, cache, gradient_checkpointing="true", blocks_to_swap=1, **OPTIONS)
    killed = run_recipe(args, env={"DIT_LORA_FAULT": "micro_batch:3"})
    assert killed.returncode == 137, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert "block swap: 1 block(s)' frozen weights" in killed.stdout
    summary = _train(tiny_sana, shapes_data, out, cache, gradient_checkpointing="true", blocks_to_swap=1,
                     resume_from_checkpoint="latest")
    assert summary["status"] == "completed" and summary["loss_history"] == read_summary(reference)["loss_history"]
    assert _file(out) == _file(reference)
