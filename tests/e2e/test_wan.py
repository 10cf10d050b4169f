"""Wan through the loop, end to end on the tiny offline pipelines: a killed or SIGTERM-stopped run resumes bit for bit
(Wan 2.1 T2V, and Wan 2.2 T2V-A14B with --wan_expert both, whose expert depends on the step number); the A14B experts
(high, low, both) write the right files, reload into the right transformer and are named in the card; TI2V-5B trains
as text-to-video and image-to-video, I2V-A14B as image-to-video; ``dit-lora export --format comfyui`` re-creates the
ComfyUI files a run wrote (the same tensor bytes and metadata).

The guard drills, nf4 base and --compile of Wan live beside the other families' (test_guard_drills.py,
test_quantized_base.py, test_compile.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import base_args, read_summary, run_recipe, train_in_process

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

#: the video flags of every run here: 9 frames of 64 x 64 (the tiny pipelines' geometry), fp32 (bf16 matmuls are
#: slow on a CPU, as in test_cogvideox.py), two clips a step
WAN = dict(family="wan", resolution=None, center_crop=None, max_num_frames=9, height=64, width=64,
           train_batch_size=2, mixed_precision="no")
ADAPTER = "pytorch_lora_weights.safetensors"
LOW_FILE = "pytorch_lora_weights_low_noise.safetensors"
INDEX_FILE = "dit_lora_adapter_files.json"


@pytest.fixture(scope="module")
def wan_model(tmp_path_factory):
    """``wan_model(variant)``: the tiny pipeline of ``variant``, built the first time a test asks for it."""
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    root, built = tmp_path_factory.mktemp("wan-models"), {}

    def model(variant: str) -> Path:
        if variant not in built:
            built[variant] = build_tiny_wan_pipeline(root / variant, variant=variant)
        return built[variant]

    return model


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    """4 captioned moving-square clips, 9 frames of 64 px at Wan's 16 fps."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    return make_moving_square_dataset(tmp_path_factory.mktemp("wan-clips") / "squares", n=4, num_frames=9, fps=16,
                                      seed=3)


def _train(model: Path, data: Path, tmp_path: Path, **overrides):
    """One in-process Wan run (WAN flags); returns (summary or exception, output folder)."""
    return train_in_process(model, data, tmp_path, **{**WAN, **overrides})


def _lora(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def _assert_bitwise_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


class _Killed(BaseException):
    """The in-process stand-in for a crash point's SIGKILL (nothing after it runs; ``train_in_process`` catches
    Exception only)."""


def _die(code):
    raise _Killed(code)


def _killed_in_process(monkeypatch, point: str, train) -> None:
    """Run ``train()`` with the crash point ``point`` (``DIT_LORA_FAULT``); it must die there."""
    from dit_lora.training import drills as hooks

    monkeypatch.setenv(hooks.CRASH_VAR, point)
    monkeypatch.setattr(hooks.os, "_exit", _die)
    with pytest.raises(_Killed):
        train()
    monkeypatch.delenv(hooks.CRASH_VAR)


class ChangedParams:
    """``on_step``: after every update, the names of the trainable parameters that update changed (from the second
    update on, or from the first against ``start``: the trainable weights before it, e.g. a checkpoint's)."""

    def __init__(self, start: dict[str, torch.Tensor] | None = None):
        self.changed: dict[int, set[str]] = {}
        self._last: dict[str, torch.Tensor] = dict(start or {})

    def __call__(self, step, model, optimizer):
        now = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        if self._last:
            self.changed[step] = {n for n, v in now.items() if not torch.equal(v, self._last[n])}
        self._last = now

    def experts(self, step: int) -> set[str]:
        """The experts (``high``/``low`` name prefixes) whose LoRA update ``step`` moved."""
        return {n.split(".", 1)[0] for n in self.changed[step]}


# ---- bitwise resume ------------------------------------------------------------------------------------------------
#: Accumulation 2, LoRA dropout, clipping and a cosine schedule with warm-up: what a resume must restore besides the
#: weights (optimizer moments, schedule position, data order, RNG streams).
T2V_RESUME = dict(max_train_steps=6, checkpointing_steps=2, gradient_accumulation_steps=2, train_batch_size=1,
                  lora_dropout=0.1, lr_scheduler="cosine", lr_warmup_steps=2, max_grad_norm=0.5)
#: --wan_expert both alternates high (odd updates) and low (even): checkpoint-3 is followed by a low step, which a
#: resumed run that counted its updates from 1 would give the high expert.
A14B_RESUME = dict(max_train_steps=5, checkpointing_steps=3, wan_expert="both", lr_scheduler="cosine",
                   lr_warmup_steps=1, lora_dropout=0.1)


@pytest.fixture(scope="module")
def references(tmp_path_factory, wan_model, clips):
    """``reference(name)``: the uninterrupted in-process run of ``t2v`` or ``a14b`` (with the experts each update
    moved), made the first time a test asks for it."""
    root, done = tmp_path_factory.mktemp("wan-refs"), {}
    settings = {"t2v": ("2.1-t2v", T2V_RESUME), "a14b": ("2.2-t2v-a14b", A14B_RESUME)}

    def reference(name: str):
        if name not in done:
            variant, opts = settings[name]
            seen = ChangedParams()
            summary, out = _train(wan_model(variant), clips, root / name, on_step=seen, **opts)
            assert isinstance(summary, dict) and summary["status"] == "completed", summary
            done[name] = (out, seen)
        return done[name]

    return reference


def _group(name: str):
    """The tests of one reference share it: one pytest-xdist worker runs them (``loadgroup``)."""
    return pytest.mark.xdist_group(f"wan-{name}")


@pytest.mark.slow
@_group("t2v")
def test_t2v_killed_mid_update_resumes_bit_for_bit(references, wan_model, clips, tmp_path, monkeypatch):
    """Killed in update 5's first micro-batch (after checkpoint-4), resumed: the same adapter and losses."""
    reference, _ = references("t2v")
    model = wan_model("2.1-t2v")
    run = lambda **extra: _train(model, clips, tmp_path, **T2V_RESUME, **extra)  # noqa: E731
    _killed_in_process(monkeypatch, "micro_batch:9", run)
    assert not (tmp_path / "out" / ADAPTER).exists()
    summary, out = run(resume_from_checkpoint="latest")
    assert isinstance(summary, dict), summary
    assert summary["steps_this_run"] == 2  # from checkpoint-4
    _assert_bitwise_equal(_lora(reference / ADAPTER), _lora(out / ADAPTER))
    assert summary["loss_history"] == read_summary(reference)["loss_history"]


@pytest.mark.slow
@_group("t2v")
def test_t2v_sigterm_saves_and_resumes_bit_for_bit(references, wan_model, clips, tmp_path):
    """A real SIGTERM to a recipe process in update 3's first micro-batch: update 3 finishes, checkpoint-3 is saved,
    exit 143; the resumed run ends with the uninterrupted run's adapter."""
    reference, _ = references("t2v")
    model, out = wan_model("2.1-t2v"), tmp_path / "out"
    # the flags of the in-process reference (train_in_process leaves the attention canary off)
    args = base_args(model, clips, out, tmp_path / "cache", **{**WAN, **T2V_RESUME},
                     attention_canary="false")
    stopped = run_recipe(args, recipe="wan", env={"DIT_LORA_SIGNAL": "micro_batch:5"}, warm=True)
    text = stopped.stdout + stopped.stderr
    assert stopped.returncode == 143, text[-3000:]
    assert "Traceback" not in text and f"after step 3 of 6: saved {out / 'checkpoint-3'}" in text, text[-3000:]
    assert not (out / ADAPTER).exists()
    summary, out = _train(model, clips, tmp_path, **T2V_RESUME, resume_from_checkpoint="latest")
    assert isinstance(summary, dict), summary
    assert summary["steps_this_run"] == 3
    _assert_bitwise_equal(_lora(reference / ADAPTER), _lora(out / ADAPTER))
    assert summary["loss_history"] == read_summary(reference)["loss_history"]


@pytest.mark.slow
@_group("a14b")
def test_a14b_both_experts_resume_bit_for_bit_with_the_same_expert_per_step(references, wan_model, clips, tmp_path,
                                                                           monkeypatch):
    """--wan_expert both: odd updates move only the high-noise expert's LoRA, even ones only the low-noise one's;
    killed after checkpoint-3 and resumed, update 4 still trains the low-noise expert and both adapter files equal
    the uninterrupted run's bit for bit."""
    reference, ref_seen = references("a14b")
    assert {s: ref_seen.experts(s) for s in (2, 3, 4, 5)} == {2: {"low"}, 3: {"high"}, 4: {"low"}, 5: {"high"}}
    model = wan_model("2.2-t2v-a14b")
    run = lambda **extra: _train(model, clips, tmp_path, **A14B_RESUME, **extra)  # noqa: E731
    _killed_in_process(monkeypatch, "micro_batch:5", run)
    seen = ChangedParams(start=_lora(tmp_path / "out" / "checkpoint-3" / "trainable_weights.safetensors"))
    summary, out = run(resume_from_checkpoint="latest", on_step=seen)
    assert isinstance(summary, dict), summary
    assert summary["steps_this_run"] == 2 and seen.experts(4) == {"low"} and seen.experts(5) == {"high"}
    for name in (ADAPTER, LOW_FILE):
        _assert_bitwise_equal(_lora(reference / name), _lora(out / name))
    assert summary["loss_history"] == read_summary(reference)["loss_history"]


# ---- the A14B experts ----------------------------------------------------------------------------------------------
#: the .safetensors files of each --wan_expert run (each expert's adapter has its own name: the low-noise one is never
#: pytorch_lora_weights.safetensors, which a plain load_lora_weights would put into `transformer`); every run also
#: writes the adapter index
EXPERT_FILES = {
    "high": {"pytorch_lora_weights.safetensors", "pytorch_lora_weights_comfyui.safetensors"},
    "low": {LOW_FILE, "pytorch_lora_weights_low_noise_comfyui.safetensors"},
    "both": {"pytorch_lora_weights.safetensors", "pytorch_lora_weights_comfyui.safetensors", LOW_FILE,
             "pytorch_lora_weights_low_noise_comfyui.safetensors"},
}
#: what the card's settings table says for each
EXPERT_CARD = {"high": "high-noise expert (`transformer`)", "low": "low-noise expert (`transformer_2`)",
               "both": "both experts, one adapter each"}


def _loaded_lora(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The LoRA weights diffusers put on ``module``, named as in the saved file (adapter name dropped)."""
    import re

    return {re.sub(r"\.(lora_[AB])\.[^.]+\.weight$", r".\1.weight", n): p.detach()
            for n, p in module.named_parameters() if ".lora_" in n}


@pytest.mark.slow
@_group("a14b")
@pytest.mark.parametrize("expert", ["high", "low", "both"])
def test_a14b_expert_runs_write_reload_and_name_their_experts(expert, references, wan_model, clips, tmp_path):
    """Each --wan_expert writes its adapter file(s), their ComfyUI files and the adapter index; dit_lora.load_adapter
    puts each file's LoRA into the transformer of its expert (`transformer`: high noise, `transformer_2`: low noise)
    with the saved values, and into no other; the card names the trained expert(s)."""
    import dit_lora
    from diffusers import WanPipeline

    model = wan_model("2.2-t2v-a14b")
    if expert == "both":
        out, _ = references("a14b")
    else:
        summary, out = _train(model, clips, tmp_path, wan_expert=expert, max_train_steps=2)
        assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert {p.name for p in out.glob("*.safetensors")} == EXPERT_FILES[expert]
    index = json.loads((out / INDEX_FILE).read_text())["files"]
    trained = {"high": ["high"], "low": ["low"], "both": ["high", "low"]}[expert]
    assert [e["label"] for e in index] == trained
    target = {"high": "transformer", "low": "transformer_2"}
    for entry in index:
        assert entry["load_kwargs"] == ({"load_into_transformer_2": True} if entry["label"] == "low" else {}), entry

    pipe = WanPipeline.from_pretrained(str(model), torch_dtype=torch.float32)
    dit_lora.load_adapter(pipe, out)
    files = {e["label"]: _lora(out / e["file"]) for e in index}
    for label, name in target.items():
        loaded = _loaded_lora(getattr(pipe, name))
        if label not in trained:
            assert not loaded, f"{name} got LoRA layers from a {expert} run"
            continue
        saved = {k.removeprefix("transformer."): v for k, v in files[label].items()}
        assert loaded.keys() == saved.keys() and saved, name
        assert all(torch.equal(loaded[k], saved[k].float()) for k in saved), name
        assert all(v.abs().sum() > 0 for k, v in saved.items() if ".lora_B." in k), f"{label} was not trained"
    card = " ".join((out / "README.md").read_text().split())
    assert f"| experts | {EXPERT_CARD[expert]} |" in card, card
    if "low" in trained:
        assert "load_into_transformer_2=True" in card
    else:
        assert "transformer_2" not in card.split("## Usage")[1].split("## Training settings")[0]


# ---- TI2V-5B and I2V-A14B ------------------------------------------------------------------------------------------
def _decode(path: Path) -> tuple[int, int, int]:
    import av

    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))
    return len(frames), frames[0].height, frames[0].width


@pytest.mark.slow
@pytest.mark.parametrize("variant, family, image_probability", [
    ("2.2-ti2v", "wan", 0.0),  # text-to-video: no sample in image mode by default
    ("2.2-ti2v", "wan_i2v", 1.0),  # image-to-video: every sample starts from its clean first latent frame
    ("2.2-i2v-a14b", "wan_i2v", None),  # two experts, 36 input channels, no CLIP
])
def test_ti2v_and_i2v_a14b_train_and_sample_from_the_reloaded_adapter(variant, family, image_probability, wan_model,
                                                                      clips, tmp_path):
    """Two updates, then the final video from the consumer pipeline with the adapter(s) reloaded."""
    summary, out = _train(wan_model(variant), clips, tmp_path, family=family, max_train_steps=2,
                          validation_prompt="a red square moving left to right", validation_inference_steps=2,
                          num_validation_images=1)
    assert isinstance(summary, dict), summary
    assert summary["status"] == "completed" and summary["family"] == family and summary["applied_updates"] == 2
    losses = torch.tensor([loss for _, loss in summary["loss_history"]] + [summary["final_loss"]])
    assert torch.isfinite(losses).all()
    (sample,) = summary["samples"]
    assert _decode(Path(sample)) == (9, 64, 64)
    card = " ".join((out / "README.md").read_text().split())
    pipeline = "WanImageToVideoPipeline" if family == "wan_i2v" else "WanPipeline"
    assert f"from diffusers import AutoencoderKLWan, {pipeline}" in card
    if image_probability is not None:
        assert f"| ti2v_image_probability | {image_probability} |" in card, card
    else:
        assert {p.name for p in out.glob("pytorch_lora_weights*.safetensors")} == EXPERT_FILES["both"]


# ---- dit-lora export -----------------------------------------------------------------------------------------------
def _safetensors_parts(path: Path) -> tuple[dict, bytes]:
    """A safetensors file as (its JSON header, parsed; the tensor bytes after it). The header's metadata is a Rust
    HashMap in the safetensors writer, so its key order (and only that) may differ between two writes."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + size]), raw[8 + size:]


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param("t2v", marks=_group("t2v")), pytest.param("a14b", marks=_group("a14b"))])
def test_export_comfyui_recreates_the_files_the_run_wrote(name, references, tmp_path):
    """`dit-lora export OUTPUT_DIR --format comfyui` on a finished run (one adapter; two experts): the ComfyUI files,
    moved away, come back identical (the same tensors, byte for byte, and the same metadata, which names the source
    file's path: the run's own folder, not a copy); exported again over them, still identical."""
    from dit_lora.commands.cli import main

    out = references(name)[0]
    written = {p.name: _safetensors_parts(p) for p in out.glob("*_comfyui.safetensors")}
    assert len(written) == (2 if name == "a14b" else 1)
    for file in written:
        (out / file).rename(tmp_path / file)
    for _ in range(2):
        with pytest.raises(SystemExit) as done:
            main(["export", str(out), "--format", "comfyui"])
        assert done.value.code == 0
        assert {p.name: _safetensors_parts(p) for p in out.glob("*_comfyui.safetensors")} == written


@pytest.mark.slow
@pytest.mark.parametrize("variant,expert", [("2.1-i2v", None), ("2.2-i2v-a14b", "low")])
def test_image_to_video_validates_during_training(variant, expert, wan_model, clips, tmp_path):
    """In-memory validation videos of image-to-video runs: Wan 2.1 (its CLIP encoder left with the cache: the
    pipeline gets the embedding computed while it was loaded) and one trained I2V-A14B expert (it runs both stages;
    the pipeline never looks for a CLIP encoder the A14B models lack). Both crashed in the pipeline before."""
    summary, out = _train(wan_model(variant), clips, tmp_path, family="wan_i2v", max_train_steps=2,
                          validation_prompt="a red square", validation_steps=1, num_validation_images=1,
                          validation_inference_steps=2, **({"wan_expert": expert} if expert else {}))
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert (out / "samples" / "step1_0.mp4").is_file() and (out / "samples" / "final_0.mp4").is_file()


# ---- clips of several aspect ratios: automatic buckets ----------------------------------------------------------
#: (width, height) of the mixed clips: square (the default 64 x 64 bucket), 3:5 portrait, 4:1 landscape
MIXED_SIZES = [(64, 64), (64, 64), (48, 80), (48, 80), (128, 32), (128, 32)]


@pytest.fixture(scope="module")
def mixed_clips(tmp_path_factory) -> Path:
    """Six captioned clips of three aspect ratios (9 frames at 16 fps), written with PyAV."""
    import numpy as np

    from dit_lora.output.video import write_video

    root = tmp_path_factory.mktemp("wan-mixed") / "clips"
    root.mkdir()
    rows = []
    for i, (width, height) in enumerate(MIXED_SIZES):
        frames = []
        for t in range(9):  # a bright bar sweeping across a dark frame
            frame = np.full((height, width, 3), 20, dtype=np.uint8)
            x = t * (width - width // 4) // 8
            frame[:, x : x + width // 4] = (200, 40 + 20 * i, 30)
            frames.append(frame)
        write_video(frames, root / f"clip_{i}.mp4", fps=16, crf=12)
        rows.append({"file_name": f"clip_{i}.mp4", "text": f"a bar sweeping across, {width}x{height}"})
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.mark.slow
def test_clips_of_three_aspects_train_in_their_buckets_and_resume_bit_for_bit(wan_model, mixed_clips, tmp_path,
                                                                              monkeypatch, capsys):
    """No --frame_buckets: each clip trains in the automatic bucket of its aspect (none cropped), the log has the
    bucket table, no step syncs with the host, and a run killed mid-update resumes to the same adapter and losses as the uninterrupted one."""
    from dit_lora.training.sync_audit import ENV_VAR

    model = wan_model("2.1-t2v")
    monkeypatch.setenv(ENV_VAR, "1")  # the reference runs under the no-host-sync audit: buckets change no step
    reference, ref_out = _train(model, mixed_clips, tmp_path / "ref", **T2V_RESUME)
    monkeypatch.delenv(ENV_VAR)
    assert isinstance(reference, dict) and reference["status"] == "completed", reference
    log = capsys.readouterr().out
    assert "clips per bucket:\n  9x64x64 (64x64 px, aspect 1.00): 2\n  9x80x48 (48x80 px, aspect 0.60): 2\n" in log
    assert "  9x32x128 (128x32 px, aspect 4.00): 2\n" in log
    assert "clips cropped by more than 10% to fit their bucket: 0 of 6" in log
    run = lambda **extra: _train(model, mixed_clips, tmp_path / "run", **T2V_RESUME, **extra)  # noqa: E731
    _killed_in_process(monkeypatch, "micro_batch:9", run)
    summary, out = run(resume_from_checkpoint="latest")
    assert isinstance(summary, dict) and summary["steps_this_run"] == 2, summary
    _assert_bitwise_equal(_lora(ref_out / ADAPTER), _lora(out / ADAPTER))
    assert summary["loss_history"] == reference["loss_history"]


@pytest.mark.slow
@_group("a14b")
def test_a14b_both_experts_evaluate_a_held_out_split(wan_model, clips, tmp_path):
    """--validation_split 0.5 with --wan_expert both: 2 of the 4 clips held out, each evaluated by the expert of its
    fixed step (odd: high noise, even: low), before the first update and after the last."""
    summary, _ = _train(wan_model("2.2-t2v-a14b"), clips, tmp_path, wan_expert="both", max_train_steps=1,
                        validation_split=0.5, validation_steps=1)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    figures = summary["validation_loss"]
    assert [step for step, _ in figures["evaluations"]] == [0, 1] and figures["samples"] == 2
    assert all(loss is not None and loss > 0 for _, loss in figures["evaluations"])
