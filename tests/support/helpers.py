"""What many tests share: the repository root, recipe runs in a subprocess or in process, run summaries.

A plain module (``pythonpath = ["tests/support"]`` in pyproject.toml), so every test imports the same copy:
``from helpers import ROOT, base_args, run_recipe``. Fixtures live in ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "sana_lora.py"

#: whether the running test carries ``@pytest.mark.slow`` (set by conftest before any fixture runs)
CURRENT = {"slow": True}


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1, for a multi-process launch's rendezvous (``--main_process_port``,
    ``MASTER_PORT``): tests run in parallel (pytest-xdist), so no two launches may share a fixed port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: a short run's captions on a SanaPipeline folder: padded to 64 tokens, without the pipeline's instruction prefix.
#: At the defaults (the instruction, 300 tokens) the tiny Gemma-2's caption encoding is half of a short run's time
#: (bf16 on a CPU without it); what those tests check does not depend on the caption length. The defaults are
#: trained by the demo configs (tests/conformance, tests/e2e/test_sana.py's demo run) and tests/families/sana.
SHORT_SANA_CAPTIONS = {"max_sequence_length": 64, "complex_human_instruction": "false"}
#: ``base_args(..., **DEFAULT_CAPTIONS)``: the pipeline's own caption settings (a test of what they are)
DEFAULT_CAPTIONS = dict.fromkeys(SHORT_SANA_CAPTIONS)


def count_reads(monkeypatch) -> dict[str, int]:
    """Every file opened for reading from now on (``open``, ``Path.read_text``/``open``: any reader), counted by its
    real path: ``count_reads(monkeypatch)[os.path.realpath(path)]``."""
    import builtins
    import io
    from collections import Counter

    counts: Counter[str] = Counter()
    real_open = io.open

    def counting(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and not set("wax+") & set(mode):
            counts[os.path.realpath(file)] += 1
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting)
    monkeypatch.setattr(builtins, "open", counting)
    return counts


def _is_sana(model: Path) -> bool:
    """Whether ``model`` is a SanaPipeline folder (its ``model_index.json``)."""
    try:
        index = json.loads((Path(model) / "model_index.json").read_text())
    except (OSError, ValueError):
        return False
    return index.get("_class_name") == "SanaPipeline"


def base_args(model: Path, data: Path, out: Path, cache: Path, **overrides) -> list[str]:
    """Recipe flags for a short CPU run on the tiny model (on a Sana folder, :data:`SHORT_SANA_CAPTIONS` too)."""
    opts = {
        "pretrained_model_name_or_path": model, "train_data_dir": data, "output_dir": out, "cache_dir": cache,
        "resolution": 64, "center_crop": "true", "rank": 4, "lora_alpha": 8, "train_batch_size": 4,
        "max_train_steps": 6, "learning_rate": 1e-3, "checkpointing_steps": 0, "report_to": "none",
        "skip_doctor": "true", "seed": 0,
        # The memory plan traces the model at start (seconds per run on 2 cores); it and its gate have their own
        # tests (tests/plan/, the default-flag demo runs of tests/conformance, the real layouts).
        "ignore_memory_plan": "true",
    }
    if _is_sana(model):
        opts.update(SHORT_SANA_CAPTIONS)
    opts.update(overrides)
    args: list[str] = []
    for k, v in opts.items():
        if v is None:
            continue
        args += [f"--{k}", str(v)]
    return args


def run_recipe(args: list[str], *, env: dict | None = None, timeout: int = 300, launcher: list[str] | None = None,
               recipe: str = "sana", warm: bool = False):
    """Run ``recipes/<recipe>_lora.py`` (default Sana) in a subprocess; returns CompletedProcess with text output.
    ``warm``: the process may be a fork of a warm interpreter that has imported the libraries already (warm.py:
    seconds of CPU less a run; not with a launcher): for a test of what a run does, not of the process starting (its
    imports, start-up time, memory or CPU time seen from outside, signals from outside). With a ``launcher``
    (``[python, -m, accelerate.commands.launch | dit_lora.commands.cli launch, options...]``) and ``warm``, the
    launch's processes are forked together (warm_launch.py)."""
    if not CURRENT["slow"]:
        pytest.fail("this test runs a recipe but is not marked slow: add @pytest.mark.slow", pytrace=False)
    script = RECIPE if recipe == "sana" else ROOT / "recipes" / f"{recipe}_lora.py"
    if launcher is not None and warm:  # the launch's processes forked from a warm interpreter (warm_launch.py)
        from warm_launch import launch, split_launcher

        via, options = split_launcher(launcher)
        return launch(options, script, args, env=env, timeout=timeout, via=via)
    if launcher is None:
        from warm import run_script

        return run_script(script, args, env=env, timeout=timeout, warm=warm)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = launcher + [str(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


class Recorder:
    """A denoiser that records its keyword arguments and returns a simple function of its input (the families' loss
    tests compare a loss to the one they compute by hand)."""

    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return (kwargs["hidden_states"] * 0.5 + 0.1,)


def read_summary(out: Path) -> dict:
    """The run's ``train_summary.json``."""
    return json.loads((Path(out) / "train_summary.json").read_text())


def train_in_process(model, data, tmp_path, *, on_step=None, **overrides):
    """Train in-process (much faster than a subprocess); returns (summary or exception, output dir)."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    out = tmp_path / "out"
    opts = {"max_train_steps": 10, "lr_scheduler": "linear", "lr_warmup_steps": 2, "attention_canary": "false"}
    opts.update(overrides)
    cfg = parse_config(base_args(model, data, out, tmp_path / "cache", **opts))
    AcceleratorState._reset_state(True)
    try:
        return train(cfg, on_step=on_step), out
    except Exception as err:  # noqa: BLE001 - the caller asserts on the exception
        return err, out
    finally:
        AcceleratorState._reset_state(True)



def text_encoding(family_name: str, model: Path, **overrides):
    """The family's components loaded as a run loads them (fp32; ``overrides`` e.g. ``quantize_text_encoder=True``),
    and ``encode(captions) -> prompt embeddings`` through them."""
    import torch

    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec(family_name)
    cfg = TrainConfig.for_family(family_name, pretrained_model_name_or_path=str(model), mixed_precision="no",
                                 **overrides)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)

    def encode(captions: list[str]):
        return spec.encoders.encode_prompts(comps, list(captions))["prompt_embeds"].float()
    return comps, encode


def assert_text_encoder_quantization_error_only(family_name: str, model: Path, captions: list[str]):
    """The nf4 text encoder's embeddings are those of the unquantized encoder with its Linear weights replaced by
    their nf4 values (bitsandbytes' own dequantization), to float rounding, and they differ from the unquantized
    encoder's. Returns (quantized, unquantized) embeddings."""
    import bitsandbytes.functional as bnbf

    plain_comps, plain_encode = text_encoding(family_name, model)
    quant_comps, quant_encode = text_encoding(family_name, model, quantize_text_encoder=True)
    plain, quant = plain_encode(captions), quant_encode(captions)
    modules, n = dict(plain_comps.encoders["text_encoder"].named_modules()), 0
    for name, module in quant_comps.encoders["text_encoder"].named_modules():
        if type(module).__name__ == "Linear4bit":
            weight = bnbf.dequantize_4bit(module.weight.data, module.weight.quant_state)
            modules[name].weight.data.copy_(weight.to(modules[name].weight.dtype))
            n += 1
    assert n > 0  # the encoder really was quantized
    dequantized, scale = plain_encode(captions), plain.abs().max().item()
    assert (quant - dequantized).abs().max().item() <= 1e-4 * scale, (quant - dequantized).abs().max()
    assert (quant - plain).abs().max().item() > 1e-2 * scale  # quantization error, far above rounding
    return quant, plain


def vlm_batch(spec, model_dir: Path, annotation: Path, num_frames: int = 4) -> dict:
    """One training example of a video LLM (the annotation's first sample, ``num_frames`` frames) as model inputs,
    built by the run's own processing (the frames' times in the prompt for the architectures that write them)."""
    from dit_lora.families.videollm.data import load_qa_samples, read_clip
    from dit_lora.families.videollm.processing import QAProcessingLoader

    processing = QAProcessingLoader(spec).load_processing(str(model_dir))
    sample = load_qa_samples(annotation)[0]
    clip = read_clip(sample.video, num_frames)
    pixels, count = processing.frame_inputs(clip.frames, clip.fps)
    example = processing.tokenize(sample.messages, count, None, clip.times)
    batch = {k: example[k][None] for k in ("input_ids", "attention_mask")}
    batch.update(spec.collate_pixels([pixels]))
    return batch
