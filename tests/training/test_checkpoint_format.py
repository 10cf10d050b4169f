"""A checkpoint's layout stays what earlier versions wrote, so a run resumes from a checkpoint written before the engine
and the levers moved into objects (issue 46): the same files, the same trainer-state keys, the same EMA tensors.

``LAYOUT`` was recorded by running this test against main's code before the change (its trainer state still built
key by key in ``save_run_checkpoint``, its weights written by accelerate's ``save_state`` called from the
checkpoint code); a resume reads exactly these names (``load_checkpoint``: accelerate's files or the engine's,
``trainer_state_rank<N>.json``'s ``run``/``guard``/``kernels``, the EMA's ``ema_weights.safetensors``).
"""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from helpers import train_in_process

#: recorded from main (commit f0d2cb4) with the settings below
LAYOUT = {
    "files": ["dit_lora_checkpoint_complete.json", "ema_weights.safetensors", "guard_snapshot.safetensors",
              "optimizer.bin", "random_states_0.pkl", "run_options.json", "trainable_weights.safetensors",
              "trainer_state_rank0.json"],
    "trainer_state": ["guard", "kernels", "rng", "run"],
    "run": ["batch_in_epoch", "epoch", "global_step", "loss_history", "rollbacks", "samples_seen", "skipped_steps",
            "validation_losses"],
    "guard": ["counts", "last_norm", "lr_factor", "rollbacks", "snapshot_step", "spike_stats", "window_flags"],
    "kernels": ["attention_backend", "checks", "enabled", "fallbacks", "inconclusive"],
    "rng": ["generator", "generator_device", "numpy", "python", "torch"],
    "ema": ["calls", "snapshot_updates", "updates"],
    "marker": ["files", "num_processes", "step"],
}


def _layout(checkpoint) -> dict:
    state = json.loads((checkpoint / "trainer_state_rank0.json").read_text())
    with safe_open(str(checkpoint / "ema_weights.safetensors"), "pt") as fh:
        ema = sorted(k for k in fh.keys() if not k.startswith(("ema/", "snapshot/")))
    marker = json.loads((checkpoint / "dit_lora_checkpoint_complete.json").read_text())
    return {
        "files": sorted(p.name for p in checkpoint.iterdir()),
        "trainer_state": sorted(state),
        **{key: sorted(state[key]) for key in ("run", "guard", "kernels", "rng")},
        "ema": ema,
        "marker": sorted(marker),
    }


@pytest.mark.slow
def test_a_checkpoint_holds_the_files_and_keys_earlier_versions_wrote(tmp_path, tiny_sana, shapes_data):
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, checkpointing_steps=2,
                                    use_ema="true", resolution=32, train_batch_size=2)
    assert isinstance(summary, dict), summary
    found = _layout(out / "checkpoint-2")
    assert found == LAYOUT, json.dumps(found)
