"""FSDP2 end to end: `dit-lora launch --config_file accelerate_configs/fsdp2.yaml` on 2 CPU processes (gloo), the
launch a user types (its `num_processes: 2`), with dit-lora sharding the model itself (training/fsdp2.py).

One Sana run carries the promises: no host sync in a step (the sync audit of tests/e2e/test_no_host_sync.py, on every
rank: the sharded forward, backward, clipping and guarded step); a NaN gradient on rank 1 only skips the update on
both ranks; validation samples
come from the sharded model (every rank takes part), and so does the held-out validation loss (each rank its share of
a separate folder's 3 images, the history kept by the resume, equal under DDP); a SIGKILL mid-run and a resume from the sharded checkpoint give
the adapter of the unbroken run bit for bit; the adapter is written once and loads into diffusers' pipeline; a DDP
run of the same seed and flags gives the same adapter. Wan 2.2 A14B trains its low-noise expert with a fully trained
backbone layer (--train_backbone) on an fp8_scaled base (its weight buffers stay whole on each rank) under FSDP2.

Every family's FSDP2 launch (its blocks sharded, each brought from host memory alone; one rank's NaN gradient skipping
the update on both ranks; the adapter written once) is the conformance suite's (tests/conformance/test_fsdp2.py, for
every name whose spec names its block lists).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import ROOT, base_args, read_summary
from safetensors.torch import load_file
from warm_launch import launch

ADAPTER = "pytorch_lora_weights.safetensors"
#: 16 images, batch 2 on 2 processes, 2 micro-batches an update: 2 updates an epoch; update 3 has a NaN gradient on
#: rank 1 only; checkpoints every 2 updates; a validation sample at update 4
SANA = dict(max_train_steps=6, train_batch_size=2, gradient_accumulation_steps=2, checkpointing_steps=2,
            mixed_precision="no", inject_faults="nan_grad@3:rank1", validation_prompt="a red square",
            validation_steps=4, validation_inference_steps=2, num_validation_images=1)


def _launch(script: str, args: list[str], *, fsdp2: bool = True, **env) -> subprocess.CompletedProcess:
    """The recipe under `dit-lora launch` on 2 processes: fsdp2.yaml, or DDP (`--multi_gpu`); the processes forked
    from a warm interpreter (warm_launch.py)."""
    engine = (["--config_file", str(ROOT / "accelerate_configs" / "fsdp2.yaml")] if fsdp2 else
              ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--dynamo_backend", "no"])
    return launch([*engine, "--mixed_precision", "no"], ROOT / "recipes" / f"{script}_lora.py", args,
                  env={"OMP_NUM_THREADS": "1", **env})


def _ok(proc: subprocess.CompletedProcess) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    return text


@pytest.mark.slow
def test_sana_fsdp2_skips_one_ranks_fault_resumes_bitwise_and_matches_ddp(tiny_sana, shapes_data, tmp_path):
    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    cache = tmp_path / "cache"
    held = make_shapes_dataset(tmp_path / "held", n=3, size=64, seed=5)  # the validation loss's: 2 forwards a rank

    def args(out: Path, **extra) -> list[str]:
        # --activation_offloading on the FSDP2 runs only: the DDP run below, without it, gives the same adapter
        return base_args(tiny_sana, shapes_data, out, cache,
                         **{**SANA, "activation_offloading": "true", "validation_data_dir": held, **extra})

    ref = tmp_path / "ref"
    text = _ok(_launch("sana", args(ref), DIT_LORA_SYNC_DEBUG="1"))  # the no-host-sync audit (test_no_host_sync.py)
    assert "engine: FSDP2" in text and "FSDP2: 2 transformer block(s) and the root sharded over 2" in text
    # parked in host memory by the loader, each brought to the device alone to be sharded (training/fsdp2.py)
    assert "2 of them brought from host memory one at a time" in text
    assert "activation offloading: the saved activations" in text  # installed on the sharded model too
    assert "attention canary: finite forward and backward" in text  # each module tested brought in alone
    summary = read_summary(ref)
    assert summary["num_processes"] == 2 and summary["skipped_steps"] == 1 and summary["nonfinite_grads"] == 1
    assert (ref / "samples" / "step4_0.png").is_file()  # sampled from the sharded model by both ranks
    assert text.count("adapter written:") == 1  # once, by the main process
    held_out = summary["validation_loss"]["evaluations"]
    assert [step for step, _ in held_out] == [0, 4, 6] and all(loss is not None for _, loss in held_out)

    # Killed after update 4 and one micro-batch of update 5; checkpoint-4 is whole, its shards in the manifest
    out = tmp_path / "out"
    killed = _launch("sana", args(out), DIT_LORA_FAULT="micro_batch:9")
    # each rank dies at the crash point (137), unless its peer's death breaks a collective it is still in first
    assert killed.returncode in (1, 137), (killed.stdout + killed.stderr)[-3000:]
    assert not (out / ADAPTER).exists()
    marker = json.loads((out / "checkpoint-4" / "dit_lora_checkpoint_complete.json").read_text())
    shards = {name for name in marker["files"] if name.startswith("sharded_state/")}
    assert {"sharded_state/.metadata", "sharded_state/__0_0.distcp", "sharded_state/__1_0.distcp"} <= shards
    assert not (out / "checkpoint-4" / "trainable_weights.safetensors").exists()  # no gathered copy
    _ok(_launch("sana", args(out, resume_from_checkpoint="latest")))
    trained, resumed = load_file(ref / ADAPTER), load_file(out / ADAPTER)
    assert trained.keys() == resumed.keys() and all(torch.equal(trained[k], resumed[k]) for k in trained)
    # steps 0 and 4 from checkpoint-4's history, step 6 evaluated again on the same weights: the same numbers
    assert read_summary(out)["validation_loss"]["evaluations"] == held_out

    # The same run under DDP: the same adapter within fp32 reduction error (2 ranks average (a + b) / 2 either way:
    # measured equal; other reduction orders, on more ranks, differ in the last bits)
    ddp = tmp_path / "ddp"
    _ok(_launch("sana", args(ddp, activation_offloading="false"), fsdp2=False))
    other = load_file(ddp / ADAPTER)
    for name, value in trained.items():
        torch.testing.assert_close(value, other[name], rtol=1e-5, atol=1e-6)
    ddp_held_out = read_summary(ddp)["validation_loss"]["evaluations"]
    torch.testing.assert_close(torch.tensor(ddp_held_out), torch.tensor(held_out), rtol=1e-5, atol=1e-6)

    # The adapter loads into diffusers' own pipeline with the saved values
    from diffusers import SanaPipeline

    pipe = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.float32)
    pipe.load_lora_weights(str(ref))
    loaded = {re.sub(r"\.(lora_[AB])\.[^.]+\.weight$", r".\1.weight", "transformer." + n): p.detach()
              for n, p in pipe.transformer.named_parameters() if ".lora_" in n}
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)


@pytest.mark.slow
def test_wan_a14b_expert_with_a_trained_backbone_layer_on_fp8_scaled_under_fsdp2(tmp_path):
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    model = build_tiny_wan_pipeline(tmp_path / "wan", variant="2.2-t2v-a14b")
    clips = make_moving_square_dataset(tmp_path / "clips", n=4, num_frames=9, fps=16, seed=3)
    out = tmp_path / "out"
    args = base_args(model, clips, out, tmp_path / "cache", family="wan", resolution=None, center_crop=None,
                     max_num_frames=9, height=64, width=64, train_batch_size=1, mixed_precision="no",
                     max_train_steps=3, wan_expert="low", train_backbone="proj_out", quantize_base="fp8_scaled")
    text = _ok(_launch("wan", args))
    assert "engine: FSDP2" in text and "stay whole on every process" in text  # fp8_scaled's weight buffers
    assert re.search(r"FSDP2: (\d+) transformer block\(s\) .*, \1 of them brought from host memory", text)
    backbone = load_file(out / "dit_lora_backbone.safetensors")
    assert backbone and all(torch.isfinite(v).all() for v in backbone.values())
    low = load_file(out / "pytorch_lora_weights_low_noise.safetensors")
    assert low and all(torch.isfinite(v).all() for v in low.values())
    assert read_summary(out)["num_processes"] == 2
