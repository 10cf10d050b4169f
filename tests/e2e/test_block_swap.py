"""``--blocks_to_swap`` end to end on the tiny Sana (two blocks: the last one swapped): a run with it is bitwise a run
without it, with gradient checkpointing off and on (the same loss history, the same adapter file bytes), and a run
killed mid-step resumes to the same bytes (the swap holds no state a checkpoint carries); Wan 2.2 A14B's two experts
alike; Qwen3-VL with one of its decoder layers swapped, bitwise the run without. LLaVA-NeXT-Video and Qwen2.5-VL train
with it in tests/e2e/test_videollm.py (the reload test and a fault drill); modeling/block_swap.py's own tests cover
the reentrant checkpoint and the parking."""

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


def _file(out: Path, name: str = ADAPTER) -> tuple[dict, bytes]:
    """The adapter file as (its header, the bytes after it). safetensors writes the header's metadata from a Rust
    HashMap, whose key order changes from one save to the next, so the header is compared as JSON; the tensors'
    bytes (names, dtypes, shapes, offsets in the header; the data after it) must be identical."""
    raw = (out / name).read_bytes()
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
    from dit_lora.modeling.swap_hooks import BlockSwap

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
    killed = run_recipe(args, env={"DIT_LORA_FAULT": "micro_batch:3"}, warm=True)
    assert killed.returncode == 137, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert "block swap: 1 block(s)' frozen weights" in killed.stdout
    summary = _train(tiny_sana, shapes_data, out, cache, gradient_checkpointing="true", blocks_to_swap=1,
                     resume_from_checkpoint="latest")
    assert summary["status"] == "completed" and summary["loss_history"] == read_summary(reference)["loss_history"]
    assert _file(out) == _file(reference)


@pytest.mark.slow
def test_wan_a14b_experts_train_alike_with_their_blocks_swapped(tmp_path):
    """Wan 2.2 A14B with ``--wan_expert both`` (WanExperts, loaded by the family) and gradient checkpointing: two of
    each expert's three blocks swapped, four alternating steps give the outputs and LoRA weights of the run without."""
    import torch

    from dit_lora.config import TrainConfig
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline
    from dit_lora.families.wan.experts import WanExperts, expert_for_step
    from dit_lora.modeling import block_swap
    from dit_lora.modeling.trainables import add_lora
    from dit_lora.registry import get_family

    path = build_tiny_wan_pipeline(tmp_path / "a14b", variant="2.2-t2v-a14b", layers=3)
    family = get_family("wan")
    results = {}
    for blocks in (0, 2):
        cfg = TrainConfig.for_family("wan", pretrained_model_name_or_path=str(path), train_data_dir="unused",
                                     mixed_precision="no", wan_expert="both", blocks_to_swap=blocks)
        family.model.validate_config(cfg)
        model = family.model.load_components(cfg, torch.device("cpu")).model
        assert isinstance(model, WanExperts)
        add_lora(model, rank=2, alpha=2, dropout=0.0, targets=family.info.default_lora_layers, seed=0)
        family.trainables.enable_gradient_checkpointing(model)
        swap = block_swap.install(model, family.info.block_lists, blocks, "cpu")
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-2)
        g = torch.Generator().manual_seed(0)
        hidden, text = torch.randn(1, 16, 3, 8, 8, generator=g), torch.randn(1, 512, 32, generator=g)
        outs = []
        for step in range(1, 5):
            name = expert_for_step(step)
            t = torch.full((1,), 950.0 if name == "high" else 300.0)
            out = model.activate(name)(hidden_states=hidden, timestep=t, encoder_hidden_states=text,
                                       return_dict=False)[0]
            out.float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            outs.append(out.detach())
        if swap is not None:  # both experts' last two blocks came and went, and wait in host memory again
            assert len(swap.states) == 4 and swap.stats.copies > 0 and swap.resident == {}
        results[blocks] = outs, [p.detach().clone() for p in params]
    assert all(torch.equal(a, b) for a, b in zip(results[0][0], results[2][0]))
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[2][1]))


@pytest.mark.slow
def test_qwen3_vl_with_a_swapped_decoder_layer_is_bitwise_the_run_without(tmp_path):
    """Qwen3-VL (the newest video LLM): the last of its language model's two decoder layers swapped (the family's
    ``decoder_layers``, parked by its loader), under the family's default gradient checkpointing and a NaN drill at
    update 2, gives the loss history, the LoRA adapter and the trained projector of the run without it, bit for bit;
    the swap really copied the layer in."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.families.videollm.spec import build_demo_model
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.modeling.swap_hooks import BlockSwap
    from dit_lora.training.loop import train

    model = build_demo_model("qwen3_vl", tmp_path / "tiny-qwen3-vl")
    data = make_qa_dataset(tmp_path / "qa", n=4, num_frames=8, size=32, layout="chat", seed=0)
    files, brought = {}, []
    bring = BlockSwap._bring

    def counted(self, state):  # count the copies: the swap must really have run
        brought.append(blocks)
        return bring(self, state)

    for blocks in (0, 1):
        out = tmp_path / f"swap-{blocks}"
        args = base_args(model, data, out, tmp_path / "cache", family="qwen3_vl", resolution=None, center_crop=None,
                         cache_dir=None, num_frames=2, train_batch_size=2, max_train_steps=3,
                         inject_faults="nan_loss@2", mixed_precision="no", attention_canary="false",
                         blocks_to_swap=blocks)
        AcceleratorState._reset_state(True)
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(BlockSwap, "_bring", counted)
                summary = train(parse_config(args))
        finally:
            AcceleratorState._reset_state(True)
        assert summary["status"] == "completed" and summary["skipped_steps"] == 1, summary["status"]
        assert summary["gradient_checkpointing"] is True and (blocks in brought) == bool(blocks)
        files[blocks] = summary["loss_history"], [_file(out, name) for name in (
            "adapter_model.safetensors", "dit_lora_backbone.safetensors")]
    assert files[1] == files[0]
