"""``--activation_offloading`` end to end on the CPU, one pair of runs per family (without, with): the run with it
offloaded real activations, skipped the NaN drill's update without a change, and ended with the loss history and the
adapter bytes of the run without it. On a CPU the "host copies" are copies into fresh CPU memory, so the code path is
the CUDA one with the streams as no-ops. Sana runs with gradient checkpointing, ``--blocks_to_swap 1`` on both sides
(the two levers' hooks chained) and the host-sync audit; DiT without checkpointing (every block's activations
offloaded); CogVideoX; SANA-Video text-to-video; Wan 2.2 A14B with both experts (each expert's forward hooked);
LLaVA-NeXT-Video, InternVL3.5 and Qwen3-VL (the language model's forward hooked, the logits left alone; 2 frames a
clip); FLUX.2 klein (both block lists); a killed Sana run resumes to the
same bytes.
fp32 compute (bf16 matmuls are slow on a CPU and not the point).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from helpers import read_summary, train_in_process
from quantized_reload import capture_steps, skipped_without_change

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

#: 3 updates, the second a NaN the guard skips; a checkpoint at update 2 (the resume test's)
RUN = dict(mixed_precision="no", train_batch_size=2, max_train_steps=3, inject_faults="nan_loss@2",
           checkpointing_steps=2)
VIDEO = dict(resolution=None, center_crop=None, max_num_frames=9, height=64, width=64)


def _tensor_bytes(out: Path) -> bytes:
    """The adapter file's tensors (names, dtypes, shapes, offsets and data): safetensors writes the header's metadata
    from a Rust HashMap, whose key order changes between saves, so the metadata is left out."""
    name = next(p.name for p in out.glob("*.safetensors"))
    raw = (out / name).read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    return json.dumps(header, sort_keys=True).encode() + raw[8 + size :]


def _pair(model_dir: Path, data: Path, tmp_path: Path, **flags) -> dict:
    """Train without and with --activation_offloading (``flags`` on both); check the drill and the equality. Returns
    the offloading run's stats."""
    from dit_lora.modeling import activation_offload

    results = {}
    for offload in ("false", "true"):
        seen, on_step = capture_steps()
        opts = {"cache_dir": tmp_path / "cache", **RUN, **flags, "activation_offloading": offload}  # one latent cache
        summary, out = train_in_process(model_dir, data, tmp_path / offload, on_step=on_step, **opts)
        assert isinstance(summary, dict) and summary["status"] == "completed", summary
        assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
        skipped_without_change(seen, 2)
        results[offload] = summary, out, activation_offload.installed(seen["model"])
    (plain, plain_out, none), (offloaded, offloaded_out, hooks) = results["false"], results["true"]
    assert none is None and hooks is not None and hooks.stats.offloaded > 0 and hooks.stats.fetched > 0
    assert offloaded["loss_history"] == plain["loss_history"]
    assert _tensor_bytes(offloaded_out) == _tensor_bytes(plain_out)
    return {"stats": hooks.stats, "out": offloaded_out}


@pytest.mark.slow
def test_sana_with_checkpointing_and_a_swapped_block_offloads_without_a_host_sync_and_resumes(
    tiny_sana, shapes_data, tmp_path, monkeypatch
):
    monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")
    flags = dict(resolution=32, gradient_checkpointing="true", blocks_to_swap=1)
    got = _pair(tiny_sana, shapes_data, tmp_path, **flags)
    assert got["stats"].shared > 0  # the text states every checkpointed block saves: one host copy
    monkeypatch.delenv("DIT_LORA_SYNC_DEBUG")
    # killed inside update 3 (the in-process stand-in for the crash point's SIGKILL), resumed from update 2's
    # checkpoint: the bytes of the uninterrupted run
    from dit_lora.training import drills

    opts = {**RUN, **flags, "activation_offloading": "true", "cache_dir": tmp_path / "cache"}
    monkeypatch.setenv(drills.CRASH_VAR, "micro_batch:3")
    monkeypatch.setattr(drills.os, "_exit", _die)
    with pytest.raises(_Killed):
        train_in_process(tiny_sana, shapes_data, tmp_path / "killed", **opts)
    monkeypatch.delenv(drills.CRASH_VAR)
    resumed, out = train_in_process(tiny_sana, shapes_data, tmp_path / "killed", resume_from_checkpoint="latest",
                                    **opts)
    assert isinstance(resumed, dict) and resumed["steps_this_run"] == 1, resumed
    assert resumed["loss_history"] == read_summary(got["out"])["loss_history"]
    assert _tensor_bytes(out) == _tensor_bytes(got["out"])


class _Killed(BaseException):
    """The in-process stand-in for a crash point's SIGKILL (nothing after it runs)."""


def _die(code):
    raise _Killed(code)


@pytest.mark.slow
def test_dit_without_checkpointing_offloads_every_block(tiny_dit, shape_classes, tmp_path):
    _pair(tiny_dit, shape_classes, tmp_path, family="dit", num_classes=3, resolution=64,
          gradient_checkpointing="false")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """4 captioned 9-frame 64 px clips at 16 fps (CogVideoX and Wan read them alike)."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    return make_moving_square_dataset(tmp_path_factory.mktemp("clips") / "squares", n=4, num_frames=9, fps=16, seed=3)


@pytest.mark.slow
def test_cogvideox_offloads(tiny_cogvideox, clips, tmp_path):
    _pair(tiny_cogvideox, clips, tmp_path, family="cogvideox", gradient_checkpointing="true", **VIDEO)


@pytest.mark.slow
def test_wan_a14b_experts_offload_each_experts_forward(tmp_path, clips):
    """--wan_expert both: updates 1 and 3 train the high-noise expert, the drilled 2 the low-noise one."""
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    model_dir = build_tiny_wan_pipeline(tmp_path / "a14b", variant="2.2-t2v-a14b")
    _pair(model_dir, clips, tmp_path, family="wan", wan_expert="both", gradient_checkpointing="true", **VIDEO)


@pytest.mark.slow
def test_sanavideo_offloads(clips, tmp_path):
    """SANA-Video text-to-video with gradient checkpointing: its blocks' saved activations offloaded."""
    from dit_lora.families.sanavideo.demo import build_tiny_sanavideo_pipeline

    model_dir = build_tiny_sanavideo_pipeline(tmp_path / "sanavideo")
    _pair(model_dir, clips, tmp_path, family="sanavideo", gradient_checkpointing="true", **VIDEO)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llava_next_video", "internvl", "qwen3_vl"])
def test_a_video_llm_offloads_its_language_model(family, tmp_path):
    from dit_lora.families.videollm.spec import build_demo_model
    from dit_lora.families.videollm.demo_clips import make_qa_dataset

    model_dir = build_demo_model(family, tmp_path / family)
    layout = "videochat2" if family == "llava_next_video" else "chat"
    data = make_qa_dataset(tmp_path / "qa", n=4, num_frames=8, layout=layout, seed=0)
    _pair(model_dir, data, tmp_path, family=family, num_frames=2, resolution=None, center_crop=None, cache_dir=None)


@pytest.mark.slow
def test_flux2_offloads_both_block_lists(tmp_path, shapes_data):
    """FLUX.2 klein (issue 36; Z-Image and Qwen-Image pair offloading with their resume runs in their own e2e files):
    the double- and single-stream blocks' saved activations offloaded, the drill and the adapter bytes unchanged."""
    from dit_lora.families.flux2.demo import build_tiny_flux2_pipeline

    model_dir = build_tiny_flux2_pipeline(tmp_path / "klein", "klein")
    result = _pair(model_dir, shapes_data, tmp_path, family="flux2", resolution=64, max_sequence_length=32,
                   gradient_checkpointing="false")
    assert result["stats"].offloaded > 0
