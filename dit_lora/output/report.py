"""What a finished run leaves besides the weights: summary JSON, loss curve and model card."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.config.adapter_types import TYPES
from dit_lora.config.schema import DataOptions, HubOptions, LoraOptions, ModelOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.capabilities import ModelCard as CardComponent
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.fileio import atomic_write, write_text_atomic
from dit_lora.modelfiles.pipeline_files import is_local
from dit_lora.modelfiles.single_file import transformer_file_record
from dit_lora.modeling import quantize
from dit_lora.output.names import ADAPTER_FILE, CARD_INPUT_FILE, CONSUMER_NAMES, MODEL_CARD_FILE
from dit_lora.output.type_card import SCALED_FACTOR, type_note, type_row, type_snippet

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN: record a non-finite figure as null."""
    return x if x is not None and math.isfinite(x) else None


def load_pyplot():
    """matplotlib's pyplot on its file-only backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)  # files only: never a window, whatever the user's backend
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_loss_curve(
    steps: list[int],
    losses: list[float],
    path: Path,
    *,
    rollbacks: Sequence[int] = (),
    validation: Sequence[tuple[int, float]] = (),
    log=print,
) -> Path | None:
    """Plot the logged loss against the step with matplotlib (the ``plot`` extra); returns the PNG's path.

    Each point is one check window's mean loss (windows whose updates were all skipped have none); a
    smoothed line (exponential moving average) shows the trend, and rollbacks are marked where they
    happened. ``validation``: the held-out loss's ``(step, loss)`` evaluations, drawn beside it with the lowest
    marked. Without matplotlib nothing is written and ``log`` says so once; training never fails over a plot.
    """
    plt = load_pyplot()
    if plt is None:
        log("loss curve: not drawn (matplotlib is not installed; `pip install dit-lora[plot]` adds it)")
        return None
    points = [(s, loss) for s, loss in zip(steps, losses) if loss is not None and math.isfinite(loss)]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    try:
        if points:
            xs, ys = zip(*points)
            ax.plot(
                xs,
                ys,
                marker="o" if len(xs) < 30 else None,
                markersize=3,
                linewidth=1,
                alpha=0.5,
                label="loss (window mean)",
            )
            if len(ys) > 2:
                ax.plot(xs, _ema(ys), linewidth=2, label="smoothed")
        held = _plot_validation(ax, validation)
        for i, step in enumerate(rollbacks):
            ax.axvline(step, color="tab:red", linestyle="--", linewidth=1, label="rollback" if i == 0 else None)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss" if held else "training loss")
        title = "training and held-out validation loss" if held else "training loss"
        ax.set_title(title if points else f"{title} (no finite training window)")
        ax.grid(True, alpha=0.3)
        if points or rollbacks or held:
            ax.legend(loc="best", fontsize="small")  # wherever it hides the fewest points
        # fixed margins, not tight_layout(): it draws the figure once more to measure it (0.17 of a plot's 0.29 s
        # on a CPU core, paid at the end of every run), for labels whose size barely changes
        fig.subplots_adjust(left=0.11, right=0.98, bottom=0.14, top=0.91)
        # atomically: a full disk or a kill never leaves half a PNG
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
    finally:
        plt.close(fig)
    return path


def _plot_validation(ax, validation: Sequence[tuple[int, float]]) -> bool:
    """The held-out loss's finite evaluations as a line with markers and its lowest point ringed; whether any was."""
    points = [(s, loss) for s, loss in validation if loss is not None and math.isfinite(loss)]
    if not points:
        return False
    xs, ys = zip(*points)
    ax.plot(xs, ys, color="tab:green", marker="s", markersize=4, linewidth=1.5, label="validation loss (held out)")
    best = min(points, key=lambda p: (p[1], p[0]))
    ax.plot(
        [best[0]],
        [best[1]],
        "o",
        markersize=10,
        markerfacecolor="none",
        color="tab:green",
        label=f"best: step {best[0]}",
    )
    return True


def _ema(values, weight: float = 0.8) -> list[float]:
    out, running = [], values[0]
    for v in values:
        running = weight * running + (1 - weight) * v
        out.append(running)
    return out


def write_model_card(
    spec: FamilySpec, cfg: TrainConfig, output_dir: Path, summary: dict, sample_files: list[Path]
) -> Path:
    """A Hub model card with YAML metadata, a runnable usage snippet, settings and samples."""
    from huggingface_hub import ModelCard

    repo_or_dir = cfg.hub.hub_model_id or str(Path(output_dir).resolve())
    base, base_model, base_note = card_base(cfg.model, cfg.hub, summary)
    run_cfg = cfg  # the snippet reads the configs the run trained with (FLUX.2's encoder depth), then names `base`
    if base != cfg.model.pretrained_model_name_or_path:  # the snippet loads the base by its Hub id
        cfg = replace(cfg, model=replace(cfg.model, pretrained_model_name_or_path=base))
    card = spec.card  # without it: no snippet, license or family rows
    data = _card_metadata(spec, cfg, base_model)
    rows = "\n".join(f"| {k} | {v} |" for k, v in _settings(spec, cfg, summary).items() if v is not None)
    samples = _samples_section(cfg.validation.prompts, sample_files)
    backbone_note = (
        "\nThis adapter also trained original weights (`dit_lora_backbone.safetensors`); load both with\n"
        "`from dit_lora import load_adapter; load_adapter(pipe, path)` instead of `pipe.load_lora_weights`.\n"
        if fallback.backbone_patterns(spec, cfg.lora, cfg.family_options)
        and spec.info.adapter_weight_name == ADAPTER_FILE
        else ""
    )
    strength = _strength_note(spec, cfg.lora) + type_note(cfg.lora, spec.exports) + _exports_note(spec)
    quantized = _quantized_note(cfg.model)
    warning = (
        f"\n> **Warning: this adapter is the last finite state of a failed run.** {summary['verdict']}\n"
        if summary.get("verdict")
        else ""
    )
    strength += changed_options_note(summary.get("changed_options")) + ema_note(summary.get("ema"))
    usage = (
        f"```python\n{_snippet(card, spec, run_cfg, repo_or_dir, base)}```\n"
        if card
        else "See the base model's documentation.\n"
    )
    title = TYPES[cfg.lora.lora_type].title
    content = f"""---
{data.to_yaml()}
---

# {Path(repo_or_dir).name}: {title} for {Path(base).name if is_local(base) else base}
{warning}
{title} adapter trained with dit-lora ({spec.info.pipeline_class_name}).{base_note}
{strength}
{quantized}
## Usage

{usage}{backbone_note}
## Training settings

| setting | value |
|---|---|
{rows}

## Samples

{samples or "(no validation prompt was set)"}
"""
    hub_card = ModelCard(content)
    path = Path(output_dir) / MODEL_CARD_FILE
    write_text_atomic(path, str(hub_card))  # renamed into place: never written through a link planted at README.md
    return path


def _samples_section(prompts: list[str], sample_files: list[Path]) -> str:
    """The card's samples: images and clips as links, a video LLM's answers as text; with several prompts, each
    prompt (quoted) before its samples (``<tag>_p<k>_<i>``: :mod:`dit_lora.output.samples`), the grid first."""
    lines: list[str] = []
    shown = None
    for path in sample_files:
        found = re.search(r"_p(\d+)_\d+$", path.stem)
        prompt = int(found.group(1)) if found and len(prompts) > 1 and int(found.group(1)) < len(prompts) else None
        if prompt is not None and prompt != shown:
            lines.append(f"\n> {' '.join(prompts[prompt].split())}\n")
            shown = prompt
        if path.suffix == ".txt":  # a video LLM's answer
            lines.append(f"```\n{path.read_text().strip()}\n```")
        else:
            lines.append(f"![{path.stem}](samples/{path.name})")
    return "\n".join(lines).strip()


def _card_metadata(spec: FamilySpec, cfg: TrainConfig, base_model):
    """The card's YAML metadata (a ``ModelCardData``): base model, library, pipeline tag, license and tags."""
    from huggingface_hub import ModelCardData

    card = spec.card
    return ModelCardData(
        base_model=base_model,
        library_name=spec.info.library_name,
        pipeline_tag=spec.info.pipeline_tag,
        license=card.base_model_license(cfg.model) if card else None,
        tags=[
            "lora",
            "dit-lora",
            *([cfg.lora.lora_type] if cfg.lora.lora_type != "lora" else []),
            *spec.info.card_tags,
        ],
    )


def _settings(spec: FamilySpec, cfg: TrainConfig, summary: dict) -> dict[str, Any]:
    """The card's training-settings table, row name to value (a ``None`` value leaves its row out)."""
    card = spec.card
    return {
        "adapter type": type_row(cfg.lora),
        "rank": cfg.lora.rank,
        "lora_alpha": _alpha_row(cfg.lora),
        "lora_layers": cfg.lora.lora_layers or list(spec.info.default_lora_layers),
        "learning_rate": cfg.training.learning_rate,
        "lr_scheduler": cfg.training.lr_scheduler,
        "train_batch_size": _batch_row(cfg.training.train_batch_size, summary.get("train_batch_size")),
        "gradient_accumulation_steps": cfg.training.gradient_accumulation_steps,
        "num_processes": summary.get("num_processes"),
        "steps": summary.get("steps"),
        "resolution": cfg.data.resolution,
        "mixed_precision": cfg.training.mixed_precision,
        "train_backbone": fallback.backbone_patterns(spec, cfg.lora, cfg.family_options) or None,
        "loraplus_lr_ratio": cfg.lora.loraplus_lr_ratio,
        # the file's name only: a Hub card names no local path
        "started from (--network_weights)": Path(cfg.lora.network_weights).name if cfg.lora.network_weights else None,
        "quantized base (--quantize_base)": (
            f"{cfg.model.quantize_base}: {quantize.describe(cfg.model)}" if quantize.enabled(cfg.model) else None
        ),
        "transformer (--transformer_file)": _transformer_file_row(cfg.model),
        "quantized text encoder (--quantize_text_encoder)": (
            "nf4 during caching" if cfg.model.quantize_text_encoder else None
        ),
        "activation offloading (--activation_offloading)": (
            "saved activations in host memory between forward and backward (values unchanged)"
            if cfg.performance.activation_offloading
            else None
        ),
        "masked loss (--masked_loss)": _masked_row(cfg.data),
        "samples left out (quarantine.json)": _quarantine_row(summary.get("quarantine")),
        **(card.card_settings(cfg) if card else {}),
        "final_loss": summary.get("final_loss"),
        "validation loss (held out)": _validation_row(summary.get("validation_loss")),
        "skipped_steps (non-finite guard)": summary.get("skipped_steps"),
        "rollbacks": summary.get("rollbacks"),
        "seed": cfg.training.seed,
    }


def _batch_row(flag: int, trained: int | None) -> int | str:
    """The batch that trained (the summary's), and the flag beside it when the data made it smaller."""
    if trained is None or trained == flag:
        return flag
    return f"{trained} (--train_batch_size {flag}; the data holds fewer samples per process)"


#: a snippet's diffusers load of the adapter from a folder or repo, with no other argument
_BARE_LOAD = re.compile(r'pipe\.load_lora_weights\((?P<where>"[^"\n]*")\)')


def _snippet(card: CardComponent, spec: FamilySpec, cfg: TrainConfig, repo_or_dir: str, base: str) -> str:
    """The family's usage snippet, right for the adapter type (``type_snippet``); loading from a Hub repo, its bare
    ``load_lora_weights(repo)`` names the file (``weight_name``): diffusers then reads it from the Hub cache offline
    too, where it would otherwise need the Hub to list the repo's files."""
    snippet = type_snippet(card.usage_snippet(cfg, repo_or_dir), cfg.lora, repo_or_dir)
    # written from the run's own configs, loading the base where the card says it is (every family's snippet names
    # the base as a JSON string)
    snippet = snippet.replace(json.dumps(str(cfg.model.pretrained_model_name_or_path)), json.dumps(base))
    snippet = _card_input_where(snippet, repo_or_dir)
    if is_local(repo_or_dir):
        return snippet
    weight = json.dumps(spec.info.adapter_weight_name)
    return _BARE_LOAD.sub(lambda m: f"pipe.load_lora_weights({m['where']}, weight_name={weight})", snippet)


def _card_input_where(snippet: str, repo_or_dir: str) -> str:
    """The snippet's image to condition on (:data:`CARD_INPUT_FILE`, written beside the adapter by the run) loaded
    where the adapter is: its path in the output folder, or the file of the Hub repo (``hf_hub_download``)."""
    name = json.dumps(CARD_INPUT_FILE)
    if f"load_image({name})" not in snippet:
        return snippet
    if is_local(repo_or_dir):
        return snippet.replace(
            f"load_image({name})", f"load_image({json.dumps(str(Path(repo_or_dir) / CARD_INPUT_FILE))})"
        )
    snippet = snippet.replace(f"load_image({name})", f"load_image(hf_hub_download({json.dumps(repo_or_dir)}, {name}))")
    return snippet.replace("import torch\n", "import torch\nfrom huggingface_hub import hf_hub_download\n", 1)


def card_base(model: ModelOptions, hub: HubOptions, summary: dict) -> tuple[str, str | None, str]:
    """(the base model the card's snippet loads, the card's ``base_model`` metadata, a sentence on a local base).

    A card for this machine (no ``--hub_model_id``) loads the base where the run read it. A card for a Hub repo never
    names a path on the trainer's disk: a base read from a local folder is named by the Hub id of the published
    checkpoint its configs match (the run's catalogue entry, ``train_summary.json``'s ``defaults``), said plainly;
    without one, the card says the base was a local folder and the snippet names it by its folder name alone.
    """
    base = str(model.pretrained_model_name_or_path)
    if not is_local(base):
        return base, base, ""  # a Hub id
    if not hub.hub_model_id:  # the card of this machine: its snippet runs here, from any folder
        where = str(Path(base).resolve())
        return where, where, ""
    name = Path(base).name
    defaults = (summary or {}).get("defaults") or {}
    entry = defaults.get("catalogue_entry")
    if entry and not defaults.get("differences"):  # a model of other depths is not the published one
        note = (
            f"read from a local folder (`{name}`) whose configs match the published `{entry}`, which the snippet loads"
        )
        return entry, entry, f"\n\nThe base model was {note}."
    note = (
        "a local folder that matches no published checkpoint dit-lora knows: the snippet loads it as "
        f"`{name}` from the working folder; put your copy there, or replace `{name}` with its Hub id or path"
    )
    return name, None, f"\n\nThe base model was {note}."


def _masked_row(data: DataOptions) -> str | None:
    """The card's masked-loss row: each image's loss weighted by its mask, and how the unmasked area counted."""
    if not getattr(data, "masked_loss", False):
        return None
    weight = f"unmasked area weighted {data.unmasked_weight:g}"
    return f"yes: per latent pixel by each image's mask, {weight}" + (
        ", each sample's loss divided by its mask's mean" if data.normalize_masked_area_loss else ""
    )


def _quarantine_row(quarantine: list | None) -> str | None:
    """How many samples the run left out (their reasons are in quarantine.json beside the adapter), if any."""
    if not quarantine:
        return None
    reasons = sorted({str(q.get("reason", "")).split(":")[0] for q in quarantine if q.get("reason")})
    return f"{len(quarantine)} (" + "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "") + ")"


def ema_note(ema: dict | None) -> str:
    """The card's sentence on a ``--use_ema`` run's EMA adapter: its decay and which file is which (empty without)."""
    if not ema:
        return ""
    # names inside the run folder (an EMA folder's files as ema/<name>): the card may be pushed, never a local path
    names = [
        f"{Path(f).parent.name}/{Path(f).name}" if Path(f).parent.name == "ema" else Path(f).name for f in ema["files"]
    ]
    warmup = (
        f", warm-up inv_gamma {ema['warmup']['inv_gamma']:g} power {ema['warmup']['power']:g}" if ema["warmup"] else ""
    )
    load = (
        'load the `ema` folder as the adapter folder (`PeftModel.from_pretrained(base, path, subfolder="ema")`, '
        '`dit_lora.load_adapter(pipe, path + "/ema")`)'
        if any(n.startswith("ema/") for n in names)
        else f'load it as the adapter: `pipe.load_lora_weights(path, weight_name="{names[0]}")`'
        if names
        else "no EMA file was written"
    )
    return (
        f"\n\nAn exponential moving average (EMA) of the trained weights was kept (`--use_ema`, decay "
        f"{ema['decay']:g}{warmup}, {ema['updates']} EMA updates over the applied optimizer updates). The adapter "
        "files hold the last trained weights; the EMA adapter, with the same keys and strength, is "
        + ", ".join(f"`{n}`" for n in names)
        + f": {load}."
    )


def _validation_row(figures: dict | None) -> str | None:
    """The card's held-out loss: the final and the best evaluation, on which samples (None: none was computed)."""
    if not figures or figures.get("final_loss") is None:
        return None
    return (
        f"{figures['final_loss']:.6g} at the end, best {figures['best_loss']:.6g} at step {figures['best_step']} "
        f"({figures['samples']} samples, {figures['source']}, fixed noise and timesteps)"
    )


def changed_options_note(history: list[dict] | None) -> str:
    """The card's sentence on the options resumes changed, each with the step it changed at (empty: none did)."""
    if not history:
        return ""
    parts = [
        f"`{c['option']}` {c['old']} -> {c['new']} at step {c['step']}"
        + (" (forced with --allow_changed_options)" if c.get("forced") else "")
        for c in history
    ]
    return "\n\nOptions changed when the run was resumed: " + "; ".join(parts) + "."


def _strength_note(spec: FamilySpec, lora: LoraOptions) -> str:
    """The card's sentence on the strength an adapter loads at, naming only the loaders a test loads it with.

    A diffusers-format file (``pytorch_lora_weights.safetensors``): ``load_lora_weights`` on the file, and on the
    same tensors with the safetensors metadata stripped, which is what a loader that reads no alpha and takes
    alpha = rank sees (tests/output/test_adapter.py, tests/families/cogvideox/test_spec.py). A PEFT folder:
    ``dit_lora.load_adapter`` and ``PeftModel.from_pretrained`` (tests/families/dit/test_spec.py,
    tests/e2e/test_videollm.py). Another consumer is named only where its own code loads the file in the tests
    (``info.loads_as_is``: ComfyUI for FLUX.1 and Chroma); ComfyUI, for one, has no Sana or DiT model and other
    CogVideoX key names (issue 28), so it loads none of those files.
    """
    alpha, rank = lora.effective_alpha, lora.rank
    start = (
        f"Load it at scale 1.0: the trained LoRA scale alpha / rank = {alpha / rank:g} (rank {rank}, alpha {alpha:g}) "
        f"is folded into the {SCALED_FACTOR[lora.lora_type]} weights\nand the files store alpha = rank"
        if alpha != rank
        else f"Load it at scale 1.0: rank {rank}, alpha = rank"
    )
    if spec.info.adapter_weight_name == ADAPTER_FILE and TYPES[lora.lora_type].diffusers_loads:
        as_is = [CONSUMER_NAMES.get(f, f) for f in spec.info.loads_as_is] if lora.lora_type == "lora" else []
        elsewhere = (
            f"\nThe file loads in {' and '.join(as_is)} as it is (its LoRA loader, at the trained strength: checked "
            "with its own code in dit-lora's tests); no export is needed."
            if as_is
            else ""
        )
        return (
            f"{start}, so diffusers' `load_lora_weights` applies the trained strength, and so does a loader that "
            "reads no alpha and assumes alpha = rank\n(checked in dit-lora's tests by loading such a file with its "
            "metadata stripped)." + elsewhere
        )
    if spec.info.adapter_weight_name != ADAPTER_FILE:
        return f"{start}, so `dit_lora.load_adapter` and PEFT's `PeftModel.from_pretrained` apply the trained strength."
    return (
        f"{start}, so PEFT (`set_peft_model_state_dict` after `add_adapter`, as below) and `dit_lora.load_adapter` "
        "apply the trained strength."
    )


def _exports_note(spec: FamilySpec) -> str:
    """The other formats a family writes (``spec.exports``), each with the family's own description of it."""
    exports = spec.exports
    if exports is None:
        return ""
    lines = [f"- `{fmt}`: {desc}" for fmt, desc in exports.export_formats().items()]
    return (
        "\n\nOther formats (`dit-lora export OUTPUT_DIR --format FORMAT` writes them beside the adapter):\n"
        + "\n".join(lines)
    )


def _quantized_note(model: ModelOptions) -> str:
    """The card's paragraphs on --quantize_base and --quantize_text_encoder (``model``: the run's ``cfg.model``;
    empty when neither was used)."""
    note = (
        f"\nTrained on a quantized base ({quantize.describe(model)}, `--quantize_base {model.quantize_base}`). "
        "The adapter is an ordinary one: load it into the unquantized pipeline as below (it then differs from the "
        "trained model by the base's quantization error only), or into one quantized the same way.\n"
        if quantize.enabled(model)
        else ""
    )
    if model.quantize_text_encoder:
        note += (
            "\nTrained with a quantized text encoder (`--quantize_text_encoder`): "
            f"{quantize.describe_text_encoder(model)}. Prompt it through the unquantized encoder as usual.\n"
        )
    return note


def _transformer_file_row(model: ModelOptions) -> str | None:
    """The card's record of a single-file transformer (``model``: the run's ``cfg.model``): its base name and size
    (a path could name the user's folders, and the card may be pushed to the Hub); None without --transformer_file."""
    record = transformer_file_record(model)
    return None if record is None else f"`{record['name']}` ({record['bytes']} bytes; the rest from the base model)"


def _alpha_row(lora: LoraOptions) -> str:
    """The card's lora_alpha (``lora``: the run's ``cfg.lora``): the trained value, and that the file stores
    alpha = rank with the scale folded in."""
    alpha = lora.effective_alpha
    if alpha == lora.rank:
        return f"{alpha:g}"
    return (
        f"{alpha:g} (scale {alpha / lora.rank:g} folded into {SCALED_FACTOR[lora.lora_type]}; the files store "
        f"alpha = rank {lora.rank})"
    )


def config_dict(cfg: TrainConfig) -> dict:
    """The resolved config as plain data, one key per option as the flags name them (the family's own options sit
    beside the common ones, as they did before options had owners: summaries and tracker filters keep their keys)."""
    values = cfg.options()  # the sections' options, flat, in the reference's order
    values.update(asdict(cfg.family_options) if cfg.family_options is not None else {})
    return values
