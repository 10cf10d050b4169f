"""What the video-LLM end-to-end tests share (tests/e2e/test_internvl.py, test_qwen3_vl.py, test_qwen3_vl_moe.py,
test_videollm.py): the tiny model + QA data fixture, training in this process, the first conversation as model inputs,
the drill / reload / resume run (:func:`check_drill_reload_resume`), a published layout trained from its folder
(:func:`check_layout_trains`) and the larger configs matched by content (:func:`check_configs_matched`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from videollm_tiny import build_tiny

QUESTION = "What colour is the square?"


def assets_fixture(builder: str, folder: str):
    """A module-scoped ``assets`` fixture: the tiny model of ``builder`` ("demo_module:function" in
    dit_lora.families.videollm) in ``folder``, and 6 chat-format conversations of 8-frame 32 px clips."""

    @pytest.fixture(scope="module", name="assets")
    def assets(tmp_path_factory) -> dict[str, Path]:
        from dit_lora.families.videollm.demo_clips import make_qa_dataset

        root = tmp_path_factory.mktemp(folder.removeprefix("tiny-").replace("-", ""))
        return {"model": build_tiny(builder, root / folder),
                "data": make_qa_dataset(root / "chat", n=6, num_frames=8, size=32, layout="chat", seed=0)}

    return assets


def drill_args(family: str, assets, out: Path, *, tower: bool = True, **overrides) -> list[str]:
    """A 4-step run of 2 frames a clip with a NaN loss injected at step 3, checkpoints every 2 steps, the projector
    trained beside the LoRA (and the vision tower with ``tower``)."""
    opts = {"family": family, "pretrained_model_name_or_path": assets["model"], "train_data_dir": assets["data"],
            "output_dir": out, "num_frames": 2, "rank": 4, "lora_alpha": 8, "train_batch_size": 2,
            "max_train_steps": 4, "checkpointing_steps": 2, "learning_rate": 2e-3, "backbone_learning_rate": 1e-3}
    if tower:
        opts.update(train_vision_tower="true", vision_tower_learning_rate=1e-3)
    opts.update({"inject_faults": "nan_loss@3", "report_to": "none", "skip_doctor": "true", "seed": 0,
                 "attention_canary": "false", "validation_prompt": QUESTION})
    opts.update(overrides)
    return [x for k, v in opts.items() if v is not None for x in (f"--{k}", str(v))]


def train_in_process(args: list[str]):
    """Train in this process; returns (summary, the trained in-memory model)."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    seen = {}
    AcceleratorState._reset_state(True)
    try:
        summary = train(parse_config(args), on_step=lambda step, model, opt: seen.update(model=model))
    finally:
        AcceleratorState._reset_state(True)
    return summary, seen["model"]


def first_batch(spec, assets, *, timed: bool) -> dict:
    """The first conversation with its 2 frames, as the run's own processing builds it. ``timed`` (Qwen3-VL): the
    frames' times in the prompt, and the modality types Qwen3VLProcessor returns beside the ids (the stock class
    needs them; dit-lora's hook fills them itself)."""
    from dit_lora.families.videollm.data import load_qa_samples, read_clip
    from dit_lora.families.videollm.processing import QAProcessingLoader

    processing = QAProcessingLoader(spec).load_processing(str(assets["model"]))
    sample = load_qa_samples(assets["data"])[0]
    clip = read_clip(sample.video, 2)
    pixels, count = processing.frame_inputs(clip.frames, clip.fps)
    if not timed:
        example = processing.tokenize(sample.messages, count, None)
        return {"input_ids": example["input_ids"][None], **spec.collate_pixels([pixels])}
    ids = processing.tokenize(sample.messages, count, None, clip.times)["input_ids"][None]
    return {"input_ids": ids, "mm_token_type_ids": spec.mm_token_type_ids(ids, processing.model_config),
            **spec.collate_pixels([pixels])}


def check_drill_reload_resume(assets, tmp_path: Path, family: str, stock_class: str, *, tower: bool, timed: bool,
                              check_outputs: Callable[[Path, dict], None], resume: bool = True) -> None:
    """Train the drill run (:func:`drill_args`): the NaN step skipped, the param groups (``vision_tower`` at its own
    rate with ``tower``), ``check_outputs(out, the saved projector/tower weights)``, a validation answer; the adapter
    reloaded by dit-lora's loader and by ``PeftModel.from_pretrained`` into ``transformers.<stock_class>`` gives the
    trained model's logits (an untrained one does not); resumed from checkpoint-2 (before the drill's step 3), the
    run ends on the same adapter, projector and tower, bit for bit (unless not ``resume``: every demo's resume with its
    projector is tests/conformance's, and the resume of a trained tower is one family's, the mechanism being shared)."""
    import transformers
    from peft import PeftModel

    from dit_lora import load_adapter
    from dit_lora.families.videollm.spec import architecture_spec

    out = tmp_path / "out"
    summary, trained = train_in_process(drill_args(family, assets, out, tower=tower))
    assert summary["status"] == "completed" and summary["steps"] == 4
    assert summary["skipped_steps"] == 1 and summary["nonfinite_losses"] == 1  # the drill's step changed nothing
    groups = {g["name"]: g for g in summary["param_groups"]}
    assert set(groups) == {"lora", "backbone"} | ({"vision_tower"} if tower else set())
    if tower:
        assert groups["vision_tower"]["lr"] == 1e-3
    extras = load_file(str(out / "dit_lora_backbone.safetensors"))
    check_outputs(out, extras)
    qa = Path(summary["samples"][0]).read_text()
    assert f"Q: {QUESTION}" in qa and "A:" in qa  # the reloaded adapter was asked about a clip

    # dit-lora's loader and PEFT's, into the stock transformers class: the trained model's logits.
    batch = first_batch(architecture_spec(family), assets, timed=timed)
    trained.eval()
    with torch.no_grad():
        want = trained(**batch).logits.float()

    def stock():
        return getattr(transformers, stock_class).from_pretrained(assets["model"], dtype=torch.bfloat16).eval()

    tolerance = 2e-2 * want.abs().max()
    with torch.no_grad():
        by_dit_lora = load_adapter(stock(), out).eval()(**batch).logits.float()
        peft_model = PeftModel.from_pretrained(stock(), str(out))
        peft_model.get_base_model().load_state_dict(extras, strict=False)  # the projector (and tower) beside the LoRA
        by_peft = peft_model.eval()(**batch).logits.float()
        untrained = stock()(**batch).logits.float()
    assert torch.allclose(by_dit_lora, want, atol=tolerance), (by_dit_lora - want).abs().max()
    assert torch.allclose(by_peft, want, atol=tolerance), (by_peft - want).abs().max()
    assert not torch.allclose(untrained, want, atol=tolerance)  # the check can fail

    if not resume:
        return
    # Resume from checkpoint-2 (before the drill's step 3): the same adapter, projector and tower, bit for bit.
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "checkpoint-2", resumed / "checkpoint-2")
    again, _ = train_in_process(drill_args(family, assets, resumed, tower=tower, resume_from_checkpoint="latest"))
    assert again["status"] == "completed" and again["skipped_steps"] == 1
    for name in ("adapter_model.safetensors", "dit_lora_backbone.safetensors"):
        a, b = load_file(str(out / name)), load_file(str(resumed / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def check_layout_trains(tmp_path: Path, model: Path, family: str, hub_id: str, *, num_frames: int,
                        differences: tuple[str, ...], targeted: Callable[[str], bool]) -> dict:
    """``dit-lora train`` with no --family on a published layout's folder ``model``, one step of ``num_frames``
    frames and no memory plan: the folder's config is ``hub_id``'s with ``differences``, one step is applied and
    trains LoRA on modules ``targeted`` accepts (lora_B no longer zero). Returns the run's summary."""
    from helpers import ROOT, read_summary
    from warm import run_script

    from dit_lora.families.videollm.demo_clips import make_qa_dataset

    data = make_qa_dataset(tmp_path / "data", n=2, num_frames=4, size=32, seed=0).parent
    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data), "--output_dir",
            str(out), "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no",
            "--gradient_accumulation_steps", "1", "--num_frames", str(num_frames), "--ignore_memory_plan", "true",
            "--skip_doctor"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)  # `dit-lora train`
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    text, summary = " ".join(proc.stdout.split()), read_summary(out)
    assert summary["family"] == family and summary["defaults"]["catalogue_entry"] == hub_id
    assert f"has the published config of {hub_id}" in text
    assert all(difference in text for difference in differences), differences
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["target_modules"] and all(targeted(t) for t in config["target_modules"])
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # trained: B left zero
    return summary


def check_configs_matched(tmp_path: Path, family: str, hub_ids: dict[str, str]) -> None:
    """Each entry's config.json (size -> hub id) cut to one layer, in a folder of its own, is matched to its own
    entry by content, with the layer count the one difference."""
    from dit_lora.catalogue import by_hub_id, match

    for size, hub_id in hub_ids.items():
        config = json.loads(json.dumps(by_hub_id(hub_id).configs["config.json"]))
        layers = config["text_config"]["num_hidden_layers"]
        config["text_config"]["num_hidden_layers"] = 1
        (tmp_path / size).mkdir()
        (tmp_path / size / "config.json").write_text(json.dumps(config))

        def read(sub, name, folder=tmp_path / size):
            path = folder / sub / name
            return json.loads(path.read_text()) if path.is_file() else None

        entry = match(family, read)
        assert entry is not None and entry.hub_id == hub_id
        assert entry.depth_differences(read) == [f"text_config.num_hidden_layers 1 (published: {layers})"]


@contextlib.contextmanager
def video_prompts(family: str) -> Iterator[dict[str, list[dict]]]:
    """What ``family`` builds of each clip while the block runs, by the clip's decoded frames (a digest): each time,
    the rate its frames were sampled at, the pixel inputs, and the prompt's video part (``video_prompt_ids``: the
    frames' times in the text, Qwen3-VL's ``<t seconds>``, and the video tokens) with the times it was given.
    Training's dataset, its validation and ``dit_lora.answer_video`` all go through these two calls."""
    from dit_lora.families.videollm.spec import architecture_spec
    from dit_lora.families.videollm.processing import VideoQAProcessing

    seen: dict[str, list[dict]] = {}
    last: list[dict] = []
    frame_inputs, arch = VideoQAProcessing.frame_inputs, type(architecture_spec(family))
    prompt_ids = arch.video_prompt_ids

    def recorded_frames(self, frames, fps=None):
        pixels, count = frame_inputs(self, frames, fps)
        key = hashlib.sha1(np.ascontiguousarray(frames).tobytes()).hexdigest()
        last[:] = [{"fps": fps, "pixels": pixels, "count": count}]
        seen.setdefault(key, []).append(last[0])
        return pixels, count

    def recorded_ids(self, tokenizer, video_tokens, config, times=None):
        ids = prompt_ids(self, tokenizer, video_tokens, config, times)
        if last and last[0]["count"] == video_tokens:  # the prompt of the frames just processed
            last[0].update(times=None if times is None else tuple(times), ids=list(ids))
        return ids

    patch = pytest.MonkeyPatch()
    patch.setattr(VideoQAProcessing, "frame_inputs", recorded_frames)
    patch.setattr(arch, "video_prompt_ids", recorded_ids)
    try:
        yield seen
    finally:
        patch.undo()


def check_card_prompts_as_trained(out: Path, assets, tmp_path: Path, family: str, trained: dict[str, list[dict]]):
    """The run's model card (``snippets.check_card``: as written, the adapter changing the answer, and as pushed) asks
    ``dit_lora.answer_video`` about a clip of the data; what it built of that clip is what training built of it (the
    drill's :func:`video_prompts`, ``trained``): the sampled rate, the pixels, the frames' times and the prompt's
    video ids, token for token."""
    from snippets import check_card

    with video_prompts(family) as card:
        check_card(out, assets["data"], tmp_path / "card")
    assert card and set(card) <= set(trained), "the card asked about frames training never built"
    for key, built in card.items():
        prompts = [w for w in trained[key] if "ids" in w]  # (a screening pass counts the tokens only)
        assert prompts, "training built no prompt of the clip the card asks about"
        want = prompts[0]
        for got in [*prompts[1:], *built]:  # training's every time; the card as written, without adapter, as pushed
            assert got["fps"] == want["fps"] and got["times"] == want["times"] and got["ids"] == want["ids"]
            assert got["pixels"].keys() == want["pixels"].keys()
            assert all(torch.equal(got["pixels"][k], want["pixels"][k]) for k in want["pixels"])
