"""Loading a Wan checkpoint for training (weights) or for the memory plan (configs on the meta device).

Only the trained expert(s) of an A14B checkpoint are read: ``--wan_expert high`` never loads ``transformer_2``.
With ``--wan_expert both`` and ``--offload_inactive_expert`` on an accelerator, only ``high``'s weights go to the
device; ``low``'s stay in CPU memory (``WanExperts.place``), as the memory plan counts.
"""

from __future__ import annotations

import torch

from dit_lora.core.quiet import dtype_kwarg
from dit_lora.modeling import quantize
from dit_lora.config import TrainConfig
from dit_lora.modelfiles.pipeline_files import load_error
from dit_lora.modelfiles.single_file import load_transformer
from dit_lora.contract.family import Components

#: subfolder of each expert in the pipeline folder
SUBFOLDER = {"high": "transformer", "low": "transformer_2"}


def trained_experts(family, cfg: TrainConfig) -> list[str]:
    """The transformers this run loads: ``["high"]`` (single-expert checkpoints, or --wan_expert high),
    ``["low"]`` or ``["high", "low"]``."""
    expert = family.expert(cfg)
    return ["high", "low"] if expert == "both" else [expert or "high"]


def load_wan_components(family, cfg: TrainConfig, device: torch.device) -> Components:
    """Transformer(s) in the run's dtype (``--quantize_base`` through diffusers' config), UMT5 in the run's dtype,
    the VAE in fp32; 2.1 image-to-video also the CLIP image encoder (fp32) and its processor."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5EncoderModel

    path, dtype = cfg.pretrained_model_name_or_path, cfg.weight_dtype
    common = {"revision": cfg.revision, "use_safetensors": True}  # never unpickle weights
    try:
        transformers_ = {}
        for expert in trained_experts(family, cfg):
            with quantize.diffusers_loading(cfg.model):
                transformers_[expert] = load_transformer(  # from the folder, or --transformer_file
                    WanTransformer3DModel, cfg.model, SUBFOLDER[expert], **dtype_kwarg("diffusers", dtype),
                    variant=cfg.variant,
                    **quantize.diffusers_kwargs(cfg), **common)
        vae = AutoencoderKLWan.from_pretrained(path, subfolder="vae", **dtype_kwarg("diffusers", torch.float32), **common)
        text_encoder = UMT5EncoderModel.from_pretrained(path, subfolder="text_encoder", **dtype_kwarg("transformers", dtype),
                                                        **quantize.text_encoder_kwargs(cfg), **common)
        tokenizer = AutoTokenizer.from_pretrained(path, subfolder="tokenizer", revision=cfg.revision)
        scheduler_cfg = _scheduler_config(path, cfg.revision)
        extra = family.load_image_encoder(cfg, common)
    except (OSError, ValueError, ImportError) as err:
        raise load_error("Wan", cfg, err) from None
    both = len(transformers_) == 2  # WanExperts.place moves them: with offloading, low's weights stay on the CPU
    for module in ((*(() if both else transformers_.values()), vae, text_encoder,
                    *(m for m in extra.values() if hasattr(m, "to")))):
        module.to(device)
    comps = family.make_components(cfg, transformers_, vae, text_encoder, scheduler_cfg, device, extra)
    if both:
        comps.model.place(device)
    comps.encoders["tokenizer"] = tokenizer
    return comps


def _scheduler_config(path: str, revision: str | None) -> dict:
    import diffusers

    return dict(diffusers.UniPCMultistepScheduler.load_config(path, subfolder="scheduler", revision=revision))


def plan_wan_components(family, cfg: TrainConfig, read, depth: int | None = None) -> Components:
    """What :func:`load_wan_components` loads, on the meta device, ``depth`` blocks deep. A two-expert run plans
    the expert on the device (the idle one waits in CPU memory with --offload_inactive_expert)."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5EncoderModel

    from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

    dtype = cfg.weight_dtype
    experts = trained_experts(family, cfg)
    on_device = experts if not (len(experts) == 2 and cfg.family_options.offload_inactive_expert) else experts[:1]
    transformers_ = {e: diffusers_on_meta(WanTransformer3DModel, with_depth(read(SUBFOLDER[e], "config.json"),
                                                                             "num_layers", depth), dtype)
                     for e in on_device}
    vae = diffusers_on_meta(AutoencoderKLWan, read("vae", "config.json"), torch.float32)
    text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype, UMT5EncoderModel)
    return family.make_components(cfg, transformers_, vae, text_encoder,
                                  read("scheduler", "scheduler_config.json") or {}, None)
