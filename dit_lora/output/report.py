"""What a finished run leaves besides the weights: summary JSON, loss curve and model card."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

from PIL import Image, ImageDraw

from .names import ADAPTER_FILE, MODEL_CARD_FILE


def finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN: record a non-finite figure as null."""
    return x if x is not None and math.isfinite(x) else None


def plot_loss_curve(steps: list[int], losses: list[float], path: Path, size=(640, 360)) -> Path:
    """Draw loss against step as a PNG with PIL (no plotting dependency)."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    left, top, right, bottom = 60, 20, size[0] - 20, size[1] - 40
    draw.rectangle([left, top, right, bottom], outline="black")
    pts = [(s, l) for s, l in zip(steps, losses) if l is not None and math.isfinite(l)]
    draw.text((left, 2), "training loss", fill="black")
    if len(pts) >= 1:
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
        y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1e-6
        coords = [
            (left + (x - x0) / (x1 - x0) * (right - left), bottom - (y - y0) / (y1 - y0) * (bottom - top)) for x, y in pts
        ]
        if len(coords) > 1:
            draw.line(coords, fill=(200, 30, 30), width=2)
        else:
            draw.ellipse([coords[0][0] - 2, coords[0][1] - 2, coords[0][0] + 2, coords[0][1] + 2], fill=(200, 30, 30))
        draw.text((4, top), f"{y1:.4g}", fill="black")
        draw.text((4, bottom - 10), f"{y0:.4g}", fill="black")
        draw.text((left, bottom + 5), f"step {x0}", fill="black")
        draw.text((right - 70, bottom + 5), f"step {x1}", fill="black")
    img.save(path)
    return path


def write_model_card(family, cfg, output_dir: Path, summary: dict, sample_files: list[Path]) -> Path:
    """A Hub model card with YAML metadata, a runnable usage snippet, settings and samples."""
    from huggingface_hub import ModelCard, ModelCardData

    repo_or_dir = cfg.hub_model_id or str(Path(output_dir).resolve())
    data = ModelCardData(
        base_model=cfg.pretrained_model_name_or_path,
        library_name=family.library_name,
        pipeline_tag=family.pipeline_tag,
        license=family.base_model_license(cfg),
        tags=["lora", "dit-lora", *family.card_tags],
    )
    settings = {
        "rank": cfg.rank, "lora_alpha": _alpha_row(cfg), "lora_layers": cfg.lora_layers or list(family.default_lora_layers),
        "learning_rate": cfg.learning_rate, "lr_scheduler": cfg.lr_scheduler, "train_batch_size": cfg.train_batch_size,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps, "num_processes": summary.get("num_processes"),
        "steps": summary.get("steps"), "resolution": cfg.resolution, "mixed_precision": cfg.mixed_precision,
        "train_backbone": family.backbone_patterns(cfg) or None, "loraplus_lr_ratio": cfg.loraplus_lr_ratio,
        **family.card_settings(cfg),
        "final_loss": summary.get("final_loss"), "skipped_steps (non-finite guard)": summary.get("skipped_steps"),
        "rollbacks": summary.get("rollbacks"), "seed": cfg.seed,
    }
    rows = "\n".join(f"| {k} | {v} |" for k, v in settings.items() if v is not None)
    samples = "\n".join(f"```\n{p.read_text().strip()}\n```" if p.suffix == ".txt" else  # a video LLM's answer
                         f"![{p.stem}](samples/{p.name})" for p in sample_files)
    backbone_note = (
        "\nThis adapter also trained original weights (`dit_lora_backbone.safetensors`); load both with\n"
        "`from dit_lora import load_adapter; load_adapter(pipe, path)` instead of `pipe.load_lora_weights`.\n"
        if family.backbone_patterns(cfg) and family.adapter_weight_name == ADAPTER_FILE else ""
    )
    loaders = ("`load_lora_weights`, ComfyUI and other loaders that read no alpha" if family.adapter_weight_name ==
               ADAPTER_FILE else "`dit_lora.load_adapter`, `PeftModel.from_pretrained` and other loaders")
    alpha, rank = cfg.effective_lora_alpha, cfg.rank
    strength = (
        f"Load it at scale 1.0: the trained LoRA scale alpha / rank = {alpha / rank:g} (rank {rank}, alpha {alpha:g}) "
        "is folded into the lora_B weights\nand the files store alpha = rank"
        if alpha != rank else f"Load it at scale 1.0: rank {rank}, alpha = rank"
    ) + f", so {loaders} all apply the trained strength."
    warning = (f"\n> **Warning: this adapter is the last finite state of a failed run.** {summary['verdict']}\n"
               if summary.get("verdict") else "")
    content = f"""---
{data.to_yaml()}
---

# {Path(repo_or_dir).name}: LoRA for {cfg.pretrained_model_name_or_path}
{warning}
LoRA adapter trained with dit-lora ({family.pipeline_class_name}).
{strength}

## Usage

```python
{family.usage_snippet(cfg, repo_or_dir)}```
{backbone_note}
## Training settings

| setting | value |
|---|---|
{rows}

## Samples

{samples or "(no validation prompt was set)"}
"""
    card = ModelCard(content)
    path = Path(output_dir) / MODEL_CARD_FILE
    card.save(str(path))
    return path


def _alpha_row(cfg) -> str:
    """The card's lora_alpha: the trained value, and that the file stores alpha = rank with the scale folded in."""
    alpha = cfg.effective_lora_alpha
    if alpha == cfg.rank:
        return f"{alpha:g}"
    return f"{alpha:g} (scale {alpha / cfg.rank:g} folded into lora_B; the files store alpha = rank {cfg.rank})"


def config_dict(cfg) -> dict:
    """The resolved config as plain data."""
    return asdict(cfg)
