"""The adapter every shipped demo config trains, hashed: ``python tools/demo_hashes.py OUT.json [--steps N]``.

A refactor that must not change behaviour (issue 46: every demo's adapter byte-identical before and after for the
same seed) runs this before and after and compares the two files. Each demo is trained in a subprocess with its
config's own flags, except fewer steps, no validation, no tracker and its own folders under a temporary directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "configs"


def demo_configs() -> list[str]:
    """Every registered family's demo configs, as paths under ``recipes/configs``."""
    sys.path.insert(0, str(ROOT))
    from dit_lora.registry import entries

    return sorted({config for entry in entries() for config in entry.demo_configs})


def train_and_hash(config: str, work: Path, steps: int) -> dict:
    """Train ``config`` for ``steps`` steps in ``work``; the sha256 of each ``.safetensors`` file it leaves in its
    output folder (checkpoints excluded)."""
    values = yaml.safe_load((CONFIGS / config).read_text())
    model = work / Path(values["pretrained_model_name_or_path"]).name
    data = work / Path(values["train_data_dir"]).relative_to(".dit_lora_demo")
    out = work / "output"
    args = [
        sys.executable,
        "-m",
        "dit_lora",
        "train",
        "--config",
        str(CONFIGS / config),
        "--pretrained_model_name_or_path",
        str(model),
        "--train_data_dir",
        str(data),
        "--output_dir",
        str(out),
        "--max_train_steps",
        str(steps),
        "--validation_prompt",
        "",
        "--report_to",
        "none",
        "--checkpointing_steps",
        "100000",
    ]
    if "cache_dir" in values:  # a diffusion family's option only
        args += ["--cache_dir", str(work / "cache")]
    start = time.monotonic()
    done = subprocess.run(args, cwd=work, capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stdout + done.stderr)[-3000:]}
    files = sorted(p for p in out.rglob("*.safetensors") if "checkpoint-" not in str(p))
    return {
        "seconds": round(time.monotonic() - start, 1),
        "files": {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="these configs only")
    ns = parser.parse_args()
    # --only adds to (or replaces entries of) an existing file: a baseline made in parts
    results = json.loads(ns.out.read_text()) if ns.only and ns.out.exists() else {}
    for config in ns.only or demo_configs():
        with tempfile.TemporaryDirectory() as tmp:
            results[config] = train_and_hash(config, Path(tmp), ns.steps)
        print(config, json.dumps(results[config])[:300], flush=True)
    ns.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
