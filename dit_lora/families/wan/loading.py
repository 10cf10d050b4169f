"""Loading a Wan checkpoint for training (weights) or for the memory plan (configs on the meta device).

Only the trained expert(s) of an A14B checkpoint are read: ``--wan_expert high`` never loads ``transformer_2``.
With ``--wan_expert both`` and ``--offload_inactive_expert`` on an accelerator, only ``high``'s weights go to the
device; ``low``'s stay in CPU memory (``WanExperts.place``), as the memory plan counts.
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.data.frames import most_tokens
from dit_lora.families.diffusion.components import DiffusionPlan, DiffusionPrecision
from dit_lora.families.diffusion.loader import KitModel, LoadedParts, PipelineParts, TextEncoder, load_pipeline
from dit_lora.families.diffusion.peft_capable import make_peft_capable
from dit_lora.families.wan.experts import WanExperts, expert_index_ranges
from dit_lora.families.wan.info import EXAMPLE_IDS, TEXT_LEN
from dit_lora.families.wan.state import WanRun
from dit_lora.families.wan.task import WanTask
from dit_lora.families.wan.validate import validate_wan_config
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

#: subfolder of each expert in the pipeline folder
SUBFOLDER = {"high": "transformer", "low": "transformer_2"}


def trained_experts(task: WanTask, cfg: TrainConfig) -> list[str]:
    """The transformers this run loads: ``["high"]`` (single-expert checkpoints, or --wan_expert high),
    ``["low"]`` or ``["high", "low"]``."""
    expert = task.expert(cfg)
    return ["high", "low"] if expert == "both" else [expert or "high"]


def load_wan_components(model: WanModel, cfg: TrainConfig, device: torch.device) -> Components:
    """The kit's loader (:func:`~dit_lora.families.diffusion.loader.load_pipeline`) on :data:`PARTS`: the trained
    expert(s) in the run's dtype (``--quantize_base`` through diffusers' config), UMT5 in the run's dtype, the VAE
    in fp32; 2.1 image-to-video also the CLIP image encoder (fp32) and its processor."""
    return load_pipeline(model, cfg, device)


def plan_wan_components(task: WanTask, cfg: TrainConfig, read, depth: int | None = None) -> Components:
    """What :func:`load_wan_components` loads, on the meta device, ``depth`` blocks deep. A two-expert run plans
    the expert on the device (the idle one waits in CPU memory with --offload_inactive_expert)."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5EncoderModel

    dtype = cfg.weight_dtype
    experts = trained_experts(task, cfg)
    on_device = experts if not (len(experts) == 2 and cfg.family_options.offload_inactive_expert) else experts[:1]
    transformers_ = {
        e: diffusers_on_meta(
            WanTransformer3DModel, with_depth(read(SUBFOLDER[e], "config.json"), "num_layers", depth), dtype
        )
        for e in on_device
    }
    vae = diffusers_on_meta(AutoencoderKLWan, read("vae", "config.json"), torch.float32)
    text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype, UMT5EncoderModel)
    return make_components(
        task, cfg, transformers_, vae, text_encoder, read("scheduler", "scheduler_config.json") or {}, None
    )


def make_components(
    task: WanTask,
    cfg: TrainConfig,
    transformers: dict[str, torch.nn.Module],
    vae,
    text_encoder,
    scheduler_cfg: dict,
    device,
    extra_encoders: dict | None = None,
) -> Components:
    """The loaded (or planned: ``device`` None) modules as the run's components, what the run decided in its
    :class:`~dit_lora.families.wan.state.WanRun`.

    ``transformers``: ``{"high": ...}`` for a single-expert checkpoint, or the trained expert(s) of an A14B.
    """
    info = task.info(cfg)
    for t in transformers.values():
        t.requires_grad_(False)
    vae.requires_grad_(False).eval()
    if text_encoder is not None:
        text_encoder.requires_grad_(False).eval()
    if len(transformers) == 2:
        model = make_peft_capable(
            WanExperts(transformers["high"], transformers["low"], offload=cfg.family_options.offload_inactive_expert)
        )
    else:
        model = next(iter(transformers.values()))
    shift = cfg.family_options.flow_shift or info.flow_shift
    scheduler = training_scheduler({"flow_shift": shift, "num_train_timesteps": info.num_train_timesteps})
    tables = flow_tables(scheduler, device if device is not None else "cpu")
    expert = task.expert(cfg)
    ranges = {"all": (0, info.num_train_timesteps)}
    if expert:
        boundary = info.expert_boundary(cfg.model.pretrained_model_name_or_path)
        ranges.update(expert_index_ranges(scheduler.timesteps, boundary, info.num_train_timesteps))
    vae_cfg = vae.config
    state = WanRun(
        scheduler_config=scheduler_cfg,
        flow_shift=shift,
        flow_tables=tables,
        index_ranges=ranges,
        expert=expert,
        trained_experts=["high", "low"] if expert == "both" else [expert or "high"],
        fps=info.fps,
        boundary_ratio=info.boundary_ratio,
        image_probability=task.image_probability(cfg),
        expand_timesteps=info.expand_timesteps,
        latents_mean=torch.tensor(vae_cfg.latents_mean, dtype=torch.float32).view(1, -1, 1, 1, 1),
        latents_std=torch.tensor(vae_cfg.latents_std, dtype=torch.float32).view(1, -1, 1, 1, 1),
    )
    return Components(
        model=model,
        scheduler=scheduler,
        encoders={"vae": vae, "text_encoder": text_encoder, **(extra_encoders or {})},
        state=state,
    )


class WanModel(KitModel):
    """``FamilySpec.model``: the checks of :mod:`.validate`, then (the kit's loader, :data:`PARTS`) the trained
    expert(s), UMT5 and the VAE."""

    def __init__(self, info, task: WanTask) -> None:
        super().__init__(info)
        self.task = task

    def validate_config(self, cfg: TrainConfig) -> None:
        """Every check that reads configs only (:func:`~dit_lora.families.wan.validate.validate_wan_config`)."""
        validate_wan_config(self.task, cfg)

    def pipeline_parts(self, cfg: TrainConfig) -> PipelineParts:
        """:data:`PARTS` of the family's task."""
        return PARTS[self.task.task]

    def transformer_folders(self, cfg: TrainConfig) -> dict[str, str]:
        """The trained expert(s): ``--wan_expert high`` never reads ``transformer_2``."""
        return {expert: SUBFOLDER[expert] for expert in trained_experts(self.task, cfg)}

    def extra_encoders(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """:meth:`image_encoders`."""
        return self.image_encoders(cfg, common)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """:func:`make_components` and the tokenizer; A14B's two experts placed by
        :meth:`~dit_lora.families.wan.experts.WanExperts.place` (with offloading, low's weights stay on the CPU)."""
        comps = make_components(
            self.task,
            cfg,
            loaded.transformers,
            loaded.vae,
            loaded.text_encoder,
            loaded.scheduler_config,
            device,
            loaded.extra,
        )
        if isinstance(comps.model, WanExperts):  # both experts (make_components holds them in WanExperts)
            comps.model.place(device)
        comps.encoders["tokenizer"] = loaded.tokenizers["tokenizer"]
        return comps

    def image_encoders(self, cfg: TrainConfig, common: dict) -> dict[str, Any]:
        """Extra encoders to load (2.1 image-to-video: CLIP); none for text-to-video."""
        return {}


class WanPrecision(DiffusionPrecision):
    """``FamilySpec.precision``: transformer and UMT5 in the run's weight dtype; the VAE (and 2.1 I2V's CLIP) fp32."""

    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """Transformer and UMT5 in the run's weight dtype; the VAE and a CLIP image encoder in fp32 (diffusers'
        Wan docs)."""
        out = {"model": cfg.weight_dtype, "vae": torch.float32, "text_encoder": cfg.weight_dtype}
        return {**out, "image_encoder": torch.float32} if "image_encoder" in comps.encoders else out


#: each task's pipeline folder, as the kit's loader reads it (the transformer subfolders: the trained experts,
#: :meth:`WanModel.transformer_folders`; the scheduler config as UniPCMultistepScheduler reads it)
PARTS = {
    task: PipelineParts(
        kind="Wan",
        example_id=example_id,
        folder_listing="transformer/, vae/, text_encoder/, tokenizer/, scheduler/",
        transformer="WanTransformer3DModel",
        vae="AutoencoderKLWan",
        text_encoders=(TextEncoder("UMT5EncoderModel"),),
        scheduler="UniPCMultistepScheduler",
        precision=WanPrecision(),
    )
    for task, example_id in EXAMPLE_IDS.items()
}


class WanPlan(DiffusionPlan):
    """``FamilySpec.plan``: the trained expert(s), UMT5 and the VAE on the meta device; clips of the worst bucket."""

    def __init__(self, task: WanTask, encoders, loss) -> None:
        super().__init__(encoders, loss)
        self.task = task

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """:func:`plan_wan_components`."""
        return plan_wan_components(self.task, cfg, read, depth)

    def blocks_wait_for_cache(self, cfg: TrainConfig) -> bool:
        """One transformer's blocks wait in host memory while the cache is built; A14B's two experts are placed by
        :class:`~dit_lora.families.wan.experts.WanExperts` (as :func:`load_wan_components` parks them)."""
        return len(trained_experts(self.task, cfg)) == 1

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """UMT5 embeddings of every prompt padded to 512 tokens, as empty tensors."""
        text = comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, TEXT_LEN, text, dtype=cfg.weight_dtype)}

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        """One clip micro-batch per bucket, ``(B, F, 3, H, W)``; automatic buckets: the one with the most tokens."""
        buckets = self.task.video_buckets(cfg)
        if not cfg.video.frame_buckets:  # automatic: every bucket has at most the default's tokens, plan the worst
            buckets = [most_tokens(buckets)]
        return [(f"{f} x {h} x {w}", (cfg.training.train_batch_size, f, 3, h, w)) for f, h, w in buckets]
