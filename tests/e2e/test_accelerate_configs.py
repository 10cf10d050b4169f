"""The shipped accelerate configs are accepted by accelerate itself.

Three levels of proof, cheapest first:
1. accelerate's own loader (`load_config_from_file`) parses every file (it rejects unknown keys)
   and the fields are what each file promises;
2. `accelerate launch`'s argument validation merges every file into launch arguments;
3. `accelerate launch --config_file ...` really starts a tiny script for cpu.yaml and for
   single_gpu.yaml with `--cpu` (the only ones that can run on a CPU-only machine).
fsdp2.yaml starts FSDP2 (dit-lora shards the model itself: tests/e2e/test_fsdp2.py runs it on 2 CPU processes);
DeepSpeed and FSDP version 1 are not shipped: a launch with either stops in one paragraph (tested below).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import pytest
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.utils import DistributedType

from helpers import ROOT

CONFIG_DIR = ROOT / "accelerate_configs"

EXPECTED = {
    "single_gpu": dict(distributed_type=DistributedType.NO, num_processes=1, use_cpu=False),
    "multi_gpu": dict(distributed_type=DistributedType.MULTI_GPU, num_processes=2, use_cpu=False),
    "cpu": dict(distributed_type=DistributedType.NO, num_processes=1, use_cpu=True),
    "fsdp2": dict(distributed_type=DistributedType.FSDP, num_processes=2, use_cpu=False),
}

PROBE = """
import json
from accelerate import Accelerator
acc = Accelerator()
print("PROBE " + json.dumps({"distributed_type": acc.state.distributed_type.value,
      "mixed_precision": acc.mixed_precision, "device": acc.device.type,
      "num_processes": acc.num_processes}))
"""


def test_every_config_is_listed():
    assert sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_loads_with_accelerates_loader(name):
    path = CONFIG_DIR / f"{name}.yaml"
    assert path.read_text().startswith("#"), "each config starts with a comment saying when to use it"
    config = load_config_from_file(str(path))  # raises on unknown keys
    assert isinstance(config, ClusterConfig)
    assert config.compute_environment.value == "LOCAL_MACHINE"
    assert config.mixed_precision == "bf16"
    assert config.num_machines == 1
    for field, value in EXPECTED[name].items():
        assert getattr(config, field) == value, (name, field)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_launch_validation_accepts_config(name):
    """`accelerate launch` merges each file into its arguments without complaint."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    args = launch_command_parser().parse_args(["--config_file", str(CONFIG_DIR / f"{name}.yaml"), "train.py"])
    args, _defaults, _mp_from_config = _validate_launch_command(args)
    assert args.mixed_precision == "bf16"
    assert args.num_processes == EXPECTED[name]["num_processes"]
    assert bool(args.use_fsdp) == (name == "fsdp2") and not args.use_deepspeed
    if name == "fsdp2":
        assert str(args.fsdp_version) == "2"
    assert bool(args.multi_gpu) == (name == "multi_gpu")
    assert bool(args.use_cpu) == (name == "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"])
def test_sharded_engines_stop_before_loading_and_name_what_to_use(engine, tmp_path):
    """A launch with FSDP version 1 (accelerate's default version) or DeepSpeed ends in seconds with one paragraph,
    before any model is read."""
    from warm import run_script

    root = CONFIG_DIR.parent
    args = ["--pretrained_model_name_or_path", str(tmp_path / "no-model-here"), "--train_data_dir", str(tmp_path),
            "--output_dir", str(tmp_path / "out"), "--skip_doctor", "true"]
    # a fork of a warm interpreter (tests/support/warm.py): accelerate reads the variable when the run makes its state
    proc = run_script(root / "recipes" / "sana_lora.py", args, env={engine: "true"}, timeout=120, cwd=root)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, text
    assert "accelerate_configs/multi_gpu.yaml" in text and "accelerate_configs/fsdp2.yaml" in text
    assert "Traceback" not in text
    assert "no-model-here" not in text  # stopped before looking for the model


@pytest.mark.slow
def test_accelerate_launch_runs_on_cpu(tmp_path):
    """Real `accelerate launch` of a tiny script: cpu.yaml, and single_gpu.yaml forced onto CPU."""
    exe = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
    if exe is None:
        pytest.skip("accelerate CLI not on PATH")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {
        "cpu": [exe, "launch", "--config_file", str(CONFIG_DIR / "cpu.yaml"), "--num_cpu_threads_per_process", "1",
                str(probe)],
        "single_gpu --cpu": [exe, "launch", "--config_file", str(CONFIG_DIR / "single_gpu.yaml"), "--cpu",
                             "--num_cpu_threads_per_process", "1", str(probe)],
    }
    # Started together: each launch is mostly interpreter start-up and imports.
    procs = {name: subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for name, cmd in runs.items()}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{name}: {err[-2000:]}"
        line = next(ln for ln in out.splitlines() if ln.startswith("PROBE "))
        state = json.loads(line[len("PROBE "):])
        assert state == {"distributed_type": "NO", "mixed_precision": "bf16", "device": "cpu",
                         "num_processes": 1}, name
