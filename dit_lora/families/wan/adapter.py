"""What a Wan run writes: the adapter files (one per expert), the ComfyUI files, the reloaded pipeline and the model
card's usage snippet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import FamilyOptions
from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.errors import UserError
from dit_lora.families.wan.comfyui import CONVERSION, DESCRIPTION, KEYS, TABLE, run_files, write_comfyui_files
from dit_lora.families.wan.info import EXPERT_FILES, EXPERT_TARGET, WanTask
from dit_lora.families.wan.state import run_state
from dit_lora.kit.adapter import (
    SEED_ARGUMENT,
    KitAdapter,
    KitCard,
    Snippet,
    VideoCard,
    image_call_args,
    image_lines,
)
from dit_lora.output.adapter import adapter_index, write_adapter_index
from dit_lora.output.comfyui_types import DORA_NOT_WRITTEN, RenamedExport, is_dora_file
from dit_lora.output.names import ADAPTER_FILE
from dit_lora.output.video import snippet_write_video

_LABEL = {"high": "high-noise expert (transformer)", "low": "low-noise expert (transformer_2)"}


# ---- adapter files -----------------------------------------------------------------------------
def split_experts(lora_state: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """A two-expert model's LoRA state (``high.``/``low.`` prefixes) as one state per expert; otherwise
    ``{"single": state}``."""
    if lora_state and all(k.startswith(("high.", "low.")) for k in lora_state):
        return {
            e: {k[len(e) + 1 :]: v for k, v in lora_state.items() if k.startswith(e + ".")} for e in ("high", "low")
        }
    return {"single": lora_state}


def adapter_files(comps: Components) -> dict[str, str]:
    """``{file name: expert}`` of a finished run: ``high`` for single-expert checkpoints. Each A14B expert's file
    has its own name, so a file is never mistaken for the other expert's (the low-noise one must load with
    ``load_into_transformer_2=True``)."""
    state = run_state(comps)
    experts = state.trained_experts or ["high"]
    if not state.expert:
        return {ADAPTER_FILE: "high"}
    return {EXPERT_FILES[e]: e for e in experts}


def save_beside_adapter(output_dir: Path, comps: Components) -> None:
    """For an A14B run, the adapter index (which file loads into which transformer); then the ComfyUI files (LoRA,
    LoKr, LoHa; not for DoRA, which ComfyUI does not reproduce: one line says so)."""
    files = adapter_files(comps)
    if ADAPTER_FILE not in files and (Path(output_dir) / ADAPTER_FILE).exists():
        # a --wan_expert low run: WanAdapter.save_adapter wrote the only file under the default name
        (Path(output_dir) / ADAPTER_FILE).rename(Path(output_dir) / EXPERT_FILES["low"])
    if run_state(comps).expert:
        write_adapter_index(
            output_dir,
            [
                {
                    "file": name,
                    "label": expert,
                    "expert": _LABEL[expert],
                    "load_kwargs": {"load_into_transformer_2": True}
                    if EXPERT_TARGET[expert] == "transformer_2"
                    else {},
                }
                for name, expert in files.items()
            ],
        )
    files = run_files(Path(output_dir), files)
    if any((Path(output_dir) / n).is_file() and is_dora_file(Path(output_dir) / n) for n in files):
        print(DORA_NOT_WRITTEN)  # a run must finish; `dit-lora export` refuses it in full
        return
    write_comfyui_files(Path(output_dir), files)


def export_wan(output_dir: Path, fmt: str) -> list[Path]:
    """``dit-lora export OUTPUT_DIR --format comfyui``: the ComfyUI files of a finished run's adapter(s)."""
    if fmt != "comfyui":
        raise UserError(f"--format {fmt}: Wan adapters export as `comfyui` only.")
    index = adapter_index(Path(output_dir))
    files = {e["file"]: e["label"] for e in index} if index else {ADAPTER_FILE: "high"}
    return write_comfyui_files(Path(output_dir), run_files(Path(output_dir), files))


# ---- the card ------------------------------------------------------------------------------
def expert_load_lines(expert: str | None, repo: str) -> str:
    """The snippet's ``load_lora_weights`` lines: each A14B expert's file into its transformer (``repo``: quoted)."""

    def low(comment: str) -> str:
        return (
            f'pipe.load_lora_weights({repo}, weight_name="{EXPERT_FILES["low"]}",\n'
            f"                       load_into_transformer_2=True)  # {comment} (transformer_2)\n"
        )

    if expert == "both":
        return f"pipe.load_lora_weights({repo})  # high-noise expert (transformer)\n" + low("low-noise expert")
    if expert == "low":
        return low("the low-noise expert")
    return f"pipe.load_lora_weights({repo})\n"


class WanAdapter(KitAdapter):
    """``FamilySpec.adapter``: the pipeline's ``save_lora_weights`` (one file per expert) and ``load_lora_weights``
    into a fresh pipeline of the base model (the VAE and 2.1's CLIP in fp32, the rest in the run's dtype)."""

    def __init__(self, info: FamilyInfo, task: WanTask) -> None:
        super().__init__(info, fp32_vae="AutoencoderKLWan")
        self.task = task

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """One LoRA file per expert (the high-noise one, or the only one, in ``pytorch_lora_weights.safetensors``;
        a two-expert model's ``high.``/``low.`` keys go to one file each); returns the first file."""
        written = [
            self.write_lora_file(output_dir, state, lora_config, EXPERT_FILES.get(expert, ADAPTER_FILE))
            for expert, state in split_experts(lora_state).items()
        ]
        return written[0]

    def pipeline_parts(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """The VAE in fp32, and :meth:`fp32_parts`."""
        return {**super().pipeline_parts(cfg, common), **self.fp32_parts(cfg, common)}

    def fp32_parts(self, cfg: TrainConfig, common: dict) -> dict[str, Any]:
        """Components the reloaded pipeline takes in fp32 besides the VAE (2.1 I2V: the CLIP image encoder)."""
        return {}


class WanExports(RenamedExport):
    """``FamilySpec.exports`` and ``adapter_extras``: ``dit-lora export --format comfyui`` (:mod:`.comfyui`'s
    conversion of each expert's adapter file) and, beside a run's adapter, which expert each file is for and the
    ComfyUI-format files."""

    def __init__(self) -> None:
        super().__init__(CONVERSION.family, TABLE, CONVERSION.known, KEYS, DESCRIPTION)

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        """:func:`export_wan`."""
        return export_wan(output_dir, fmt)

    def save_adapter_extras(self, output_dir: Path, comps: Components, options: FamilyOptions) -> None:
        """:func:`save_beside_adapter` (it reads no option)."""
        save_beside_adapter(output_dir, comps)


class WanCard(VideoCard, KitCard):
    """``FamilySpec.card``: the snippet, Wan's rows (size, model, schedule, experts) and Wan-AI's license."""

    task: WanTask

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """Loading the adapter(s) with diffusers (each expert's file into its transformer) and making a video."""
        frames, height, width = self.task.video_buckets(cfg)[0]
        extra_import, before, image_arg = self.snippet_image()
        imports, image = image_lines(extra_import, image_arg)
        return self.video_snippet(
            cfg,
            repo_or_dir,
            vae="AutoencoderKLWan",
            imports=imports,
            load=expert_load_lines(self.task.expert(cfg.model, cfg.family_options), json.dumps(repo_or_dir)),
            before_call=before,
            call_args=[
                f"prompt={self.prompt(cfg.validation)},",
                *image,
                f"num_frames={frames}, height={height}, width={width},",
                image_call_args(cfg.data, cfg.validation)[1],
                f'{SEED_ARGUMENT} output_type="pil",',
            ],
            tail=snippet_write_video(self.task.info(cfg.model).fps)
            + "# ComfyUI: the *_comfyui.safetensors file(s) carry ComfyUI's Wan key names (loaded by ComfyUI's own LoRA\n"
            "# loader in dit-lora's comfyui tests, and through diffusers' converter in CI): LoRA loader, strength 1.0\n",
        )

    def snippet_image(self) -> tuple[str, str, str]:
        """(extra import, lines before the call, argument) for the usage snippet's conditioning image (none)."""
        return "", "", ""

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The buckets, the model, the timestep sampling and shift, the frame sampling, the experts, TI2V's mode."""
        info = self.task.info(cfg.model)
        settings = self.video_rows(
            cfg,
            timestep_sampling=cfg.family_options.timestep_sampling,
            flow_shift=cfg.family_options.flow_shift or info.flow_shift,
        )
        expert = self.task.expert(cfg.model, cfg.family_options)
        if expert:
            settings["experts"] = {
                "high": "high-noise expert (`transformer`)",
                "low": "low-noise expert (`transformer_2`)",
                "both": "both experts, one adapter each",
            }[expert]
        if info.kind == "ti2v":
            settings["ti2v_image_probability"] = self.task.image_probability(cfg.model, cfg.family_options)
        return settings
