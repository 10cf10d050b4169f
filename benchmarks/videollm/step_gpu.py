#!/usr/bin/env python
"""GPU benchmark of dit-lora's video-LLM LoRA train step on the real LLaVA-NeXT-Video-7B architecture.

    python benchmarks/videollm/step_gpu.py --out benchmarks/videollm/step_gpu.json --markdown /tmp/videochat.md
    python benchmarks/videollm/step_gpu.py --liger off --frames 16 --batch_size 2
    python benchmarks/videollm/step_gpu.py --smoke      # checks the script on CPU; records nothing

The model: ``LlavaNextVideoForConditionalGeneration`` with random weights, built in bf16 straight on
the GPU from the configuration below (nothing is downloaded): a CLIP ViT-L/14-336 vision tower
(hidden 1024, 24 layers, 16 heads, MLP 4096, 336 px, patch 14), the 2x2 average video pooler
(``spatial_pool_stride`` 2: 24 x 24 patches -> 144 video tokens per frame), the two-layer GELU
projector and a Mistral-7B language model in VideoChat2-Mistral's layout (hidden 4096, 32 layers,
32 query / 8 key-value heads, MLP 14336, RoPE theta 1e6, no sliding window; vocabulary 32,000 plus
the ``<video>``/``<image>`` tokens, padded to 32,064 as the llava-hf checkpoints are). About 7.57B
parameters. Random weights time the same kernels as a real checkpoint.

The batch: 8 frames x batch 4 by default; each sample is a system prompt, ``<video>`` expanded to
8 x 144 = 1,152 video tokens, a ~32-token question and a ~32-token answer, i.e. ~1,230 tokens,
rendered with a Mistral-instruct chat template (``<s>[INST] ... [/INST] answer</s>``) and labelled
by dit-lora's own ``build_training_example`` (loss on the answer and its ``</s>`` only), right-padded
by ``pad_batch``, frames preprocessed by the spec (``LlavaNextVideoSpec.frame_inputs``: resize to
336, center crop, CLIP normalisation) and batched by ``collate_pixels`` -- the loop's data path. The
token ids come from dit-lora's tiny offline Mistral-style tokenizer (no Mistral tokenizer is
downloaded), so the model's ``<video>``/``<image>`` ids are set to that tokenizer's; the sequence
lengths and layout, which decide the cost, are those of a real sample.

Training setup, as ``recipes/videollm_lora.py`` does it (the video-LLM family spec's components): LoRA rank 64
(alpha 64) on every q/k/v/o/gate/up/down projection of the language model (``spec.model.lora_targets``:
full module names, never the vision tower), the projector trained fully
(``spec.trainables.backbone_patterns``), the vision tower frozen, fp32 trainable weights under bf16
autocast, gradient checkpointing on (the family's default, non-reentrant). One timed step is the
loop's step: ``spec.loss.compute_loss`` (the model's causal-LM loss on answer tokens, or with Liger
its fused linear cross-entropy on the last hidden states) under bf16 autocast, backward, clipping
at 1.0, fused AdamW with the non-finite skip in the kernel, ``zero_grad(set_to_none=True)``
(``benchmarks.common.gpu_step.train_step_fn``). CUDA events per step; peak memory since the model was built.

Liger rows (``--use_liger_kernel``: ``spec.setup.configure`` -> ``dit_lora.families.videollm.liger.apply_liger``) run
after the plain rows, because Liger patches transformers' Mistral module globally. Without
``liger-kernel`` installed they are recorded as skipped ("liger: not installed").

No published step time exists to compare with: VideoChat2's own trainer publishes none.

Without CUDA it exits with status 2. ``--smoke`` runs dit-lora's tiny LLaVA-NeXT-Video (built into a
temporary folder) on the CPU, batch 2 x 4 frames, two steps, with and without ``--use_liger_kernel``
(which on a CPU falls back to the plain loss with a note), checks that the loss is finite and that
the LoRA and projector weights changed, and reports no numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.common.gpu_step import (device_line, env_info, finish, lora_updated, memory_fields, no_cuda_message,  # noqa: E402
                            run_guarded, time_steps, train_step_fn)

FAMILY = "llava_next_video"

# CLIP ViT-L/14-336 (openai/clip-vit-large-patch14-336), LLaVA-NeXT-Video's vision tower.
VISION_CONFIG = {
    "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
    "image_size": 336, "patch_size": 14, "projection_dim": 768, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
}
# Mistral-7B-Instruct-v0.2, VideoChat2-Mistral's language model; 32,000 words + <video>/<image>, padded to 32,064.
TEXT_CONFIG = {
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32064, "max_position_embeddings": 32768,
    "rope_theta": 1e6, "sliding_window": None, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False,
}
MULTIMODAL_CONFIG = {
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "spatial_pool_mode": "average",
    "spatial_pool_stride": 2, "projector_hidden_act": "gelu", "multimodal_projector_bias": True,
    "tie_word_embeddings": False,
}
SYSTEM_PROMPT = "You are a helpful assistant that answers questions about short videos."
# Words the question and answer texts are drawn from (the tiny tokenizer encodes each as one token or a few).
_WORDS = ("the square moves from left to right it is red blue green yellow orange purple white black gray pink "
          "video clip frame frames one two three four what which way does colour direction describe").split()


def build_llava_next_video_7b(tokenizer, device, torch):
    """Random-weight LLaVA-NeXT-Video-7B (Mistral LM), bf16, built directly on ``device``, frozen."""
    from transformers import CLIPVisionConfig, LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration, MistralConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<video>", "<image>")}
    text = MistralConfig(**TEXT_CONFIG, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    config = LlavaNextVideoConfig(vision_config=CLIPVisionConfig(**VISION_CONFIG), text_config=text,
                                  video_token_index=ids["<video>"], image_token_index=ids["<image>"],
                                  pad_token_id=tokenizer.pad_token_id, **MULTIMODAL_CONFIG)
    with torch.device(device):
        model = LlavaNextVideoForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
    model.requires_grad_(False)
    return model


def _text(tokenizer, n_tokens: int, rng: random.Random, end: str) -> str:
    """Words from ``_WORDS`` until the text is at least ``n_tokens`` tokens long (as it follows a space)."""
    words: list[str] = []
    while len(tokenizer.encode(" " + " ".join(words) + end, add_special_tokens=False)) < n_tokens:
        words.append(rng.choice(_WORDS))
    return (" ".join(words) + end).capitalize()


def make_batch(processing, args, frame_size: tuple[int, int], device, torch) -> dict:
    """One collated batch through the loop's data path (frame_inputs, tokenize, pad_batch, collate_pixels);
    ``processing``: the run's ``VideoQAProcessing`` (``comps.state.processing``)."""
    import numpy as np

    from dit_lora.families.videollm.prompts import pad_batch

    rng_np = np.random.default_rng(0)
    items = []
    for i in range(args.batch_size):
        rng = random.Random(i)
        frames = rng_np.integers(0, 256, size=(args.frames, *frame_size, 3), dtype=np.uint8)
        pixels, count = processing.frame_inputs(frames)
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": _text(processing.tokenizer, args.question_tokens, rng, "?")},
                    {"role": "assistant", "content": _text(processing.tokenizer, args.answer_tokens, rng, ".")}]
        items.append({**processing.tokenize(messages, count, None), "pixels": pixels})
    batch = pad_batch([{k: it[k] for k in ("input_ids", "labels", "attention_mask")} for it in items],
                      processing.pad_token_id)
    batch.update(processing.spec.collate_pixels([it["pixels"] for it in items]))
    batch = {k: v.to(device) for k, v in batch.items()}
    batch["sample_index"] = list(range(args.batch_size))
    return batch


def run_config(liger: bool, checkpointing: bool, args, device, torch, tiny_dir: Path | None) -> dict:
    from dit_lora.config import TrainConfig
    from dit_lora.contract.family import Components
    from dit_lora.registry import get_spec
    from dit_lora.modeling import trainables
    from dit_lora.training.optim import make_optimizer
    from dit_lora.families.videollm.liger import plain_loss

    model_name = "tiny (smoke)" if args.smoke else "LLaVA-NeXT-Video-7B (Mistral)"
    result = {"model": model_name, "frames": args.frames, "batch_size": args.batch_size, "liger": liger,
              "gradient_checkpointing": checkpointing, "rank": args.rank}
    if liger and not args.smoke and not _liger_installed():
        result.update(status="skipped", note="liger: not installed (pip install liger-kernel)")
        return result
    cfg = TrainConfig.for_family(FAMILY, pretrained_model_name_or_path=str(tiny_dir) if tiny_dir else None,
                                 rank=args.rank, lora_alpha=args.rank, train_batch_size=args.batch_size,
                                 num_frames=args.frames, gradient_checkpointing=checkpointing, learning_rate=1e-4,
                                 backbone_learning_rate=2e-5, max_grad_norm=1.0, mixed_precision="bf16",
                                 use_liger_kernel=liger)

    def body() -> None:
        spec = get_spec(FAMILY)
        if args.smoke:  # the loop's own loading of a model folder
            comps = spec.model.load_components(cfg, device)
            frame_size = (48, 64)
        else:
            from dit_lora.families.videollm.demo_llava import build_tiny_videollm_tokenizer

            tokenizer = build_tiny_videollm_tokenizer()
            model = build_llava_next_video_7b(tokenizer, device, torch)
            from dit_lora.families.videollm.processing import VideoQAProcessing
            from dit_lora.families.videollm.state import VideoLLMState

            arch = spec.model.arch
            prep = dict(arch.default_preprocessing, resize_to=None)  # 336 shortest edge + crop
            comps = Components(model=model, state=VideoLLMState(VideoQAProcessing(arch, tokenizer, prep,
                                                                                  model.config)))
            frame_size = (360, 640)
        model = comps.model
        result["base_params"] = sum(p.numel() for p in model.parameters())
        result["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        log = io.StringIO()
        with contextlib.redirect_stdout(log):  # configure() prints Liger's note or its "applied" line
            spec.setup.configure(comps, cfg)
        note = log.getvalue().strip()
        if note:
            print("  " + note, flush=True)
            result["note"] = note
        if liger and comps.state.loss_fn is plain_loss:
            if not args.smoke:  # the same step as the plain row: nothing to measure
                result["status"] = "skipped"
                return
            if "plain PyTorch path" not in note:
                result["status"] = "liger fallback gave no note"
                return
            result["liger_path"] = "fallback (plain loss)"
        elif liger:
            result["liger_path"] = "applied"

        # What the loop does after loading (dit_lora/training/loop.py), with the family's hooks.
        targets = spec.model.lora_targets(model, cfg.lora)
        trainables.add_lora(model, rank=cfg.lora.rank, alpha=cfg.effective_lora_alpha, dropout=cfg.lora.lora_dropout,
                          targets=targets, seed=0)
        backbone_names = trainables.unfreeze_backbone(model, spec.trainables.backbone_patterns(cfg.lora, cfg.family_options))
        trainables.cast_trainable_to_fp32(model, under_autocast=True)
        if checkpointing:
            spec.trainables.enable_gradient_checkpointing(model)
        model.train()
        groups = trainables.build_param_groups(model, learning_rate=cfg.training.learning_rate, backbone_names=backbone_names,
                                             backbone_learning_rate=cfg.lora.backbone_learning_rate,
                                             weight_decay=cfg.training.adam_weight_decay, loraplus_lr_ratio=None)
        optimizer, fused = make_optimizer(cfg.training, groups, device)
        params = [p for g in groups for p in g["params"]]
        named = dict(model.named_parameters())
        result.update(fused_adamw=fused, lora_modules=len(targets),
                      lora_params=sum(p.numel() for n, p in named.items() if "lora_" in n and p.requires_grad),
                      projector_params=sum(named[n].numel() for n in backbone_names))
        watched = {n: named[n].detach().clone() for n in (next(n for n in named if "lora_B" in n), backbone_names[0])}

        data = make_batch(comps.state.processing, args, frame_size, device, torch)
        total = int(data["attention_mask"].sum())
        answer = int((data["labels"] != -100).sum())
        video = int((data["input_ids"] == model.config.video_token_index).sum())
        result.update(seq_len=int(data["input_ids"].shape[1]), tokens_per_step=total, answer_tokens_per_step=answer,
                      video_tokens_per_step=video, padded_tokens_per_step=int(data["input_ids"].numel()))

        step = train_step_fn(spec.loss, comps, model, data, cfg, optimizer, fused, params, device, torch)
        result.update(time_steps(step, steps=args.steps, warmup_steps=args.warmup_steps, device=device, torch=torch))
        med = result["median_s_per_step"]
        result["tokens_per_s"] = round(total / med, 1)
        result["answer_tokens_per_s"] = round(answer / med, 1)
        result["samples_per_s"] = round(args.batch_size / med, 3)
        result["lora_updated"] = lora_updated(model)
        changed = {n: not torch.equal(before, named[n].detach()) for n, before in watched.items()}
        result["weights_changed"] = changed
        result.update(memory_fields(device, torch))
        if not math.isfinite(result["final_loss"]):
            result["status"] = "non-finite loss"
        elif not all(changed.values()):
            result["status"] = "weights unchanged: " + ", ".join(n for n, c in changed.items() if not c)

    return run_guarded(result, body, device, torch)


def _liger_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("liger_kernel") is not None


def _liger_version() -> str:
    import importlib.metadata as md

    try:
        return md.version("liger-kernel")
    except md.PackageNotFoundError:
        return "not installed"


def markdown(rows: list[dict], env: dict) -> str:
    lines = [
        device_line(env) + f" transformers {env.get('transformers')}, liger-kernel {env.get('liger_kernel')}.",
        "",
        "| device | model | frames x batch | Liger | grad. ckpt | tokens/step (video) | tokens/s | answer tokens/s | "
        "s/step (median) | peak allocated (GiB) | peak reserved (GiB) |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        head = (f"| {env.get('gpu', 'cpu')} | {r['model']} | {r['frames']} x {r['batch_size']} | "
                f"{'on' if r['liger'] else 'off'} | {'on' if r['gradient_checkpointing'] else 'off'} |")
        if r["status"] != "ok":
            why = r.get("note") or r.get("error", "")
            lines.append(f"{head} {r['status']}: {why} | | | | | |")
            continue
        lines.append(f"{head} {r['tokens_per_step']} ({r['video_tokens_per_step']}) | {r['tokens_per_s']:.0f} | "
                     f"{r['answer_tokens_per_s']:.0f} | {r['median_s_per_step']:.3f} | "
                     f"{r.get('peak_allocated_gib', '')} | {r.get('peak_reserved_gib', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "videollm" / "step_gpu.json"))
    ap.add_argument("--markdown", default=None, help="Also write the table to this file.")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--batch_size", type=int, default=4)
    ap.add_argument("--question_tokens", type=int, default=32)
    ap.add_argument("--answer_tokens", type=int, default=32)
    ap.add_argument("--liger", default="both", choices=("both", "on", "off"),
                    help="Rows with and/or without --use_liger_kernel (plain rows always run first).")
    ap.add_argument("--gradient_checkpointing", default="on", choices=("both", "on", "off"))
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10, help="Timed steps per configuration.")
    ap.add_argument("--warmup_steps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true",
                    help="No GPU needed: the tiny LLaVA-NeXT-Video on CPU, batch 2 x 4 frames, 2 steps, to test this "
                         "script (the Liger row exercises the CPU fallback).")
    args = ap.parse_args(argv)

    import torch

    tmp = None
    if args.smoke:
        import tempfile

        from dit_lora.families.videollm.demo_llava import build_tiny_llava_next_video

        device = torch.device("cpu")
        args.frames, args.batch_size, args.steps, args.warmup_steps = 4, 2, 2, 0
        tmp = tempfile.TemporaryDirectory(prefix="dit-lora-bench-videochat-")
        tiny_dir = build_tiny_llava_next_video(Path(tmp.name) / "tiny-llava-next-video")
    else:
        if not torch.cuda.is_available():
            print(no_cuda_message("videollm/step_gpu.py", torch), file=sys.stderr)
            return 2
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True
        tiny_dir = None
    ligers = {"both": [False, True], "on": [True], "off": [False]}[args.liger]
    ckpts = {"both": [True, False], "on": [True], "off": [False]}[args.gradient_checkpointing]
    env = env_info(torch)
    env["liger_kernel"] = _liger_version()
    print(f"device: {env.get('gpu', 'cpu (smoke test)')}, torch {env['torch']}, transformers {env['transformers']}, "
          f"liger-kernel {env['liger_kernel']}", flush=True)
    rows = []
    try:
        for liger in ligers:  # Liger patches transformers' Mistral module globally: its rows go last
            for ckpt in ckpts:
                print(f"{'tiny' if args.smoke else 'LLaVA-NeXT-Video-7B'}, {args.frames} frames x batch "
                      f"{args.batch_size}, Liger {'on' if liger else 'off'}, gradient checkpointing "
                      f"{'on' if ckpt else 'off'} ...", flush=True)
                row = run_config(liger, ckpt, args, device, torch, tiny_dir)
                rows.append(row)
                if row["status"] == "ok":
                    print(f"  ok: {row['median_s_per_step']:.3f} s/step, {row['tokens_per_s']:.0f} tokens/s "
                          f"({row['answer_tokens_per_s']:.0f} answer tokens/s), loss {row['final_loss']:.3f}"
                          + (f", peak {row['peak_allocated_gib']} GiB" if "peak_allocated_gib" in row else ""),
                          flush=True)
                else:
                    print(f"  {row['status']}: {row.get('note') or row.get('error', '')}", flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    settings = {"frames": args.frames, "batch_size": args.batch_size, "question_tokens": args.question_tokens,
                "answer_tokens": args.answer_tokens, "rank": args.rank, "lora_alpha": args.rank,
                "lora_targets": "language model q/k/v/o/gate/up/down_proj (spec.model.lora_targets)",
                "projector": "trained (spec.trainables.backbone_patterns)", "vision_tower": "frozen",
                "steps": args.steps, "warmup_steps": args.warmup_steps,
                "vision_config": VISION_CONFIG, "text_config": TEXT_CONFIG, "multimodal_config": MULTIMODAL_CONFIG}
    return finish(rows, args, benchmark="videollm/step_gpu", env=env, settings=settings, table=markdown(rows, env))


if __name__ == "__main__":
    sys.exit(main())
