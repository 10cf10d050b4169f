"""Class-conditional DiT (diffusers ``DiTTransformer2DModel`` / ``DiTPipeline``), OpenDiT-style.

Labels. The caption of a sample is its class name: the first-level sub-folder of an image in a
folder without metadata (``root/<class>/<image>``), the caption column of a metadata file, or a
``datasets`` ``ClassLabel`` column (``--caption_column label``) mapped to its names. The class list
is the sorted set of names; class i is the i-th name (so sorted ImageNet wnid folders get the
standard ImageNet indices). It is written to ``dit_lora_classes.json`` and is part of the cache key.

Class count. ImageNet DiTs embed 1000 classes plus one null class (the last row of each block's
``LabelEmbedding`` table, used for classifier-free guidance; ``DiTPipeline`` feeds it as id 1000).
A dataset with another class count stops with a message unless ``--num_classes N`` is given; then
every block's table is resized to N + 1 rows: the null row is copied to the end, the N class rows
are drawn from a normal with the per-dimension mean and std of the old class rows (each new class
starts as a "typical" class embedding; same seed for every block, so tables that were copies stay
copies), and the tables are trained in fp32 at ``--backbone_learning_rate`` through the backbone
machinery (``--train_backbone`` gets the table's pattern) and saved to
``dit_lora_backbone.safetensors``. Because ``DiTPipeline`` hard-codes 1000 as the null id, a resized
embedding maps id 1000 to its own null row (a forward pre-hook), so the stock pipeline's guidance works.

Loss. Epsilon-prediction DDPM as DiT trains it: t uniform in [0, num_train_timesteps), x_t from
``DDPMScheduler.add_noise`` with the checkpoint's betas (DiT: linear 1e-4..0.02, 1000 steps), class
labels dropped to the null class with DiT's probability (0.1) for guidance, MSE between the
predicted and the true noise. With a learned sigma (``out_channels == 2 * in_channels``) the output
is split as ``DiTPipeline`` does and only the epsilon half enters the loss: the variance half gets
no gradient (DiT's VLB term for it is not implemented), and inference discards it as diffusers does.

Precision. The transformer loads in the run's weight dtype (bf16 by default), LoRA and the class
tables train in fp32, the ``AutoencoderKL`` stays fp32; latents are the VAE posterior mean times
``scaling_factor`` (0.18215 for DiT), so the cache is deterministic.

Saving. ``DiTPipeline`` has no LoRA loader and ``DiTTransformer2DModel`` no PEFT mixin, so the adapter
is saved in PEFT's own format (``adapter_model.safetensors`` + ``adapter_config.json``), next to the
class tables and the label map; ``dit_lora.load_adapter(pipe, output_dir)`` restores all three.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from dit_lora.core.quiet import dtype_kwarg
from dit_lora.modeling import quantize
from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.output.names import CLASSES_FILE, PEFT_ADAPTER_FILE
from dit_lora.contract.family import Components, schedule_on_device
from dit_lora.contract.capabilities import (
    AdapterExtras, AdapterFitting, Demo, FusedKernels, ImageBuckets, MemoryPlan, ModelCard, ModelDefaults, Precision,
    RunSetup, Samples, Trainables,
)
from dit_lora.output.adapter import attach_adapter
from dit_lora.families.diffusion import DiffusionFamily, make_peft_capable
from dit_lora.families.dit.classes import class_count_error, map_to_pretrained, pretrained_labels
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    is_local,
    load_error,
    model_stamp,
    read_component_config,
)

#: the class id DiTPipeline feeds for the unconditional half of classifier-free guidance
PIPELINE_NULL_CLASS = 1000
#: regex (``--train_backbone``) of every block's class-embedding table
CLASS_EMBEDDING_PATTERN = r"\.class_embedder\.embedding_table\.weight$"
#: DiT's label-dropout probability for guidance (diffusers' CombinedTimestepLabelEmbeddings default)
DEFAULT_CLASS_DROPOUT = 0.1


# ---- model helpers (used by training and by dit_lora.load_adapter) ---------------------------
def label_embeddings(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(name, LabelEmbedding)`` of every block (diffusers gives each DiT block its own table)."""
    from diffusers.models.embeddings import LabelEmbedding

    return [(n, m) for n, m in model.named_modules() if isinstance(m, LabelEmbedding)]


def _map_pipeline_null(module, args):
    """Forward pre-hook: DiTPipeline's hard-coded null id 1000 -> this (resized) table's null row."""
    labels = args[0]
    if module.num_classes != PIPELINE_NULL_CLASS and torch.is_tensor(labels):
        labels = torch.where(labels == PIPELINE_NULL_CLASS, module.num_classes, labels)
    return (labels, *args[1:])


def resize_class_embeddings(model: torch.nn.Module, num_classes: int, *, seed: int = 0,
                            dtype: torch.dtype | None = None) -> None:
    """Resize every block's class table to ``num_classes`` + 1 rows, the null (guidance) row last.

    New class rows ~ N(mean, std) of the old class rows, per dimension (one generator seeded with
    ``seed`` per table); the old null row is copied. ``dtype`` defaults to the old table's dtype.
    Updates ``num_embeds_ada_norm`` in the model config and maps DiTPipeline's null id 1000 to the new
    null row.
    """
    tables = label_embeddings(model)
    if not tables:
        raise UserError("This transformer has no class embedding (LabelEmbedding); it is not a class-conditional DiT.")
    for name, emb in tables:
        old = emb.embedding_table.weight.detach()
        old_classes = int(emb.num_classes)
        if old.shape[0] != old_classes + 1:
            raise UserError(
                f"{name} has {old.shape[0]} rows for {old_classes} classes, so it has no null class for "
                "classifier-free guidance; dit-lora cannot resize it."
            )
        rows = old[:old_classes].float().cpu()  # drawn on the CPU: the same rows whatever the device
        generator = torch.Generator().manual_seed(seed)
        fresh = torch.randn((num_classes, rows.shape[1]), generator=generator)
        fresh = rows.mean(0) + rows.std(0) * fresh
        table = torch.cat([fresh.to(old.device), old[old_classes:].float()])
        new = torch.nn.Embedding(num_classes + 1, rows.shape[1], device=old.device, dtype=dtype or old.dtype)
        with torch.no_grad():
            new.weight.copy_(table)
        new.weight.requires_grad_(emb.embedding_table.weight.requires_grad)
        emb.embedding_table = new
        emb.num_classes = num_classes
        if not getattr(emb, "_dit_lora_null_hook", False):
            emb.register_forward_pre_hook(_map_pipeline_null)
            emb._dit_lora_null_hook = True
    model.register_to_config(num_embeds_ada_norm=num_classes)


def _native_resolution(cfg: TrainConfig) -> tuple[int, str] | None:
    """``(pixels, why)`` from the transformer's ``sample_size`` and the VAE's downsampling (configs only)."""
    tr_cfg, vae_cfg = read_component_config(cfg, "transformer"), read_component_config(cfg, "vae")
    if not (tr_cfg and vae_cfg):
        return None
    factor = 2 ** (len(vae_cfg.get("block_out_channels", [0] * 4)) - 1)
    sample = int(tr_cfg.get("sample_size", 32))
    return sample * factor, f"transformer sample_size {sample} x the VAE's {factor}x"


def read_classes(adapter_dir: str | Path) -> dict | None:
    """The label map a DiT run saved (``dit_lora_classes.json``), or None."""
    path = Path(adapter_dir) / CLASSES_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def split_class_names(prompt: str, known) -> list[str]:
    """Class names in a validation prompt: the whole string if it is a class, else comma-separated names."""
    prompt = prompt.strip()
    if prompt in known:
        return [prompt]
    return [p.strip() for p in prompt.split(",") if p.strip()]


def _trained_classes(cfg: TrainConfig) -> tuple[list[str] | None, int | None]:
    """(class names, class count) of the adapter the run saved in ``--output_dir`` (the model card's source)."""
    info = read_classes(cfg.output_dir) if cfg.output_dir else None
    return (info["classes"], info["num_classes"]) if info else (None, None)


class DiTFamily(DiffusionFamily):
    """Class-conditional DiT (facebook/DiT-XL-2-256/512 and tiny random variants)."""

    name = "dit"
    default_lora_layers = ("to_q", "to_k", "to_v", "to_out.0")
    card_tags = ("class-conditional", "diffusers", "dit", "diffusers-training")
    pipeline_class_name = "DiTPipeline"
    repeated_block_classes = ("BasicTransformerBlock",)  # DiTTransformer2DModel declares neither list
    adapter_weight_name = PEFT_ADAPTER_FILE
    caption_source = "class_folders"
    capabilities = DiffusionFamily.capabilities + (
        Demo, ModelDefaults, Precision, RunSetup, Trainables, Samples, MemoryPlan, ModelCard, AdapterFitting,
        AdapterExtras, FusedKernels, ImageBuckets,
    )

    def bucket_stride(self, cfg: TrainConfig) -> int:
        """:class:`~..capabilities.ImageBuckets`: the VAE's downsampling x the patch size (8 x 2), from the configs."""
        named = bool(cfg.pretrained_model_name_or_path)
        tr_cfg = (read_component_config(cfg, "transformer") if named else None) or {}
        vae_cfg = (read_component_config(cfg, "vae") if named else None) or {}
        return 2 ** (len(vae_cfg.get("block_out_channels", [0] * 4)) - 1) * int(tr_cfg.get("patch_size", 2))

    def square_only(self, cfg: TrainConfig) -> str | None:
        """:class:`~..capabilities.ImageBuckets`: always: diffusers' DiTTransformer2DModel unpatchifies its output as a
        square (``height = width = sqrt(tokens)``), so a non-square latent cannot go through it."""
        return ("the DiT transformer takes only square inputs (diffusers' DiTTransformer2DModel unpatchifies a "
                "square), so every image is cropped to the --resolution square")

    def kernel_patch_points(self) -> tuple:
        """:class:`~..capabilities.FusedKernels`: the blocks and processors the fused kernels patch (``kernels.py``)."""
        from dit_lora.families.dit.kernels import patch_points

        return patch_points()

    # ---- checks before loading ------------------------------------------------------------
    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """The only resolution DiTPipeline samples at: the transformer's ``sample_size`` x the VAE's factor."""
        native = _native_resolution(cfg)
        return {"resolution": native} if native else {}

    def validate_config(self, cfg: TrainConfig) -> None:
        path = cfg.pretrained_model_name_or_path
        if cfg.caption_dropout_probability > 0:
            raise UserError(
                f"--caption_dropout_probability {cfg.caption_dropout_probability:g} is for captioned models; DiT is "
                "class-conditional and already drops class labels to its null class (the last row of its class "
                "table, the id DiTPipeline's guidance feeds) with the checkpoint's own probability (its "
                "LabelEmbedding dropout_prob: 0.1 for facebook/DiT-XL-2-256, as in the DiT paper), drawn on the "
                "run's generator so a resume is exact. A second dropout would stack on it. Remove "
                "--caption_dropout_probability."
            )
        check_pipeline_folder(cfg, "DiT", "facebook/DiT-XL-2-256", "transformer/, vae/, scheduler/")
        tr_cfg = read_component_config(cfg, "transformer")
        if tr_cfg is not None and (tr_cfg.get("norm_type", "ada_norm_zero") != "ada_norm_zero"
                                   or not tr_cfg.get("num_embeds_ada_norm")):
            raise UserError(
                f"`{path}` is not a class-conditional DiT (its transformer has norm_type "
                f"{tr_cfg.get('norm_type')!r} and num_embeds_ada_norm {tr_cfg.get('num_embeds_ada_norm')!r}). "
                "Use a DiTPipeline checkpoint such as facebook/DiT-XL-2-256, or another --family."
            )
        native = _native_resolution(cfg)
        if native is not None and cfg.resolution != native[0]:
            raise UserError(
                f"--resolution {cfg.resolution} differs from this DiT's native {native[0]} px ({native[1]}): "
                f"DiTPipeline always samples at {native[0]} px. Use --resolution {native[0]}, or leave it unset."
            )
        if cfg.family_options.num_classes is not None:
            model_classes = (tr_cfg or {}).get("num_embeds_ada_norm")
            if cfg.family_options.num_classes < 1:
                raise UserError(f"--num_classes must be at least 1, got {cfg.family_options.num_classes}.")
            if cfg.family_options.num_classes > PIPELINE_NULL_CLASS and cfg.family_options.num_classes != model_classes:
                raise UserError(
                    f"--num_classes {cfg.family_options.num_classes} is above {PIPELINE_NULL_CLASS}: DiTPipeline "
                    "hard-codes class "
                    f"id {PIPELINE_NULL_CLASS} as the null class for guidance, so a resized model could not be "
                    "sampled with it. Use at most 1000 classes."
                )
        check_safetensors(cfg, ("transformer", "vae"), "DiT")
        self._check_class_folders(cfg, (tr_cfg or {}).get("num_embeds_ada_norm"))
        sched = read_component_config(cfg, "scheduler", "scheduler_config.json") or {}
        if sched.get("prediction_type", "epsilon") != "epsilon":
            raise UserError(
                f"The scheduler of `{path}` has prediction_type {sched.get('prediction_type')!r}; the DiT recipe "
                "trains epsilon prediction (as DiT does) only."
            )

    def _check_class_folders(self, cfg: TrainConfig, model_classes: int | None) -> None:
        """The class-count check of :meth:`inspect_samples`, run on the folder names before the model loads."""
        from dit_lora.data.sources import class_folder_names

        names = (class_folder_names(cfg.train_data_dir)
                 if cfg.family_options.num_classes is None and not cfg.dataset_name else None)
        if not names or not model_classes or len(names) == int(model_classes):
            return
        known = pretrained_labels(cfg, int(model_classes))
        if map_to_pretrained(names, known) is None:
            raise class_count_error(names, int(model_classes), cfg.pretrained_model_name_or_path, known)

    def prepare_demo(self, cfg: TrainConfig) -> None:
        from dit_lora.data.synthetic import is_user_folder
        from dit_lora.data.synthetic.shapes import SHAPES_CLASS_MARKER, make_shapes_class_dataset
        from dit_lora.families.dit.demo import build_tiny_dit_pipeline, get_tiny_dit_config

        build_tiny_dit_pipeline(cfg.pretrained_model_name_or_path, size=cfg.demo_size, seed=0)
        if cfg.train_data_dir and is_user_folder(cfg.train_data_dir, SHAPES_CLASS_MARKER):
            print(f"--demo: --train_data_dir {cfg.train_data_dir} already holds data; training on it as it is",
                  flush=True)
        elif cfg.train_data_dir:
            size = get_tiny_dit_config(cfg.demo_size)["resolution"]
            make_shapes_class_dataset(cfg.train_data_dir, n=cfg.demo_num_images, size=size, seed=0)

    def expected_dtypes(self, comps: Components, cfg: TrainConfig) -> dict[str, torch.dtype]:
        """Transformer in the run's weight dtype (bf16 by default); the AutoencoderKL in fp32."""
        return {"model": cfg.weight_dtype, "vae": torch.float32}

    # ---- loading ---------------------------------------------------------------------------
    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        from diffusers import AutoencoderKL, DiTTransformer2DModel

        path = cfg.pretrained_model_name_or_path
        common = {"revision": cfg.revision}
        try:
            with quantize.diffusers_loading(cfg.model):  # --quantize_base: diffusers' own quantization config
                transformer = DiTTransformer2DModel.from_pretrained(
                    path, subfolder="transformer", **dtype_kwarg("diffusers", cfg.weight_dtype), variant=cfg.variant,
                    use_safetensors=True, **quantize.diffusers_kwargs(cfg), **common
                )
            vae = AutoencoderKL.from_pretrained(path, subfolder="vae", **dtype_kwarg("diffusers", torch.float32), use_safetensors=True,
                                                **common)
        except (OSError, ValueError, ImportError) as err:
            raise load_error("DiT", cfg, err) from None
        scheduler_cfg = read_component_config(cfg, "scheduler", "scheduler_config.json") or {}
        transformer.to(device)
        vae.to(device)
        return self._components(transformer, vae, scheduler_cfg, device)

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        from diffusers import AutoencoderKL, DiTTransformer2DModel

        from dit_lora.plan.fake import diffusers_on_meta, with_depth

        transformer = diffusers_on_meta(DiTTransformer2DModel, with_depth(read("transformer", "config.json"),
                                                                          "num_layers", depth), cfg.weight_dtype)
        vae = diffusers_on_meta(AutoencoderKL, read("vae", "config.json"), torch.float32)
        return self._components(transformer, vae, read("scheduler", "scheduler_config.json") or {}, None)

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        return {"class_labels": torch.zeros(batch_size, dtype=torch.long)}

    def _components(self, transformer, vae, scheduler_cfg: dict, device) -> Components:
        """The loaded (or planned) transformer and VAE as the run's components (``device`` None: leave tables)."""
        from diffusers import DDPMScheduler

        make_peft_capable(transformer)
        tables = label_embeddings(transformer)
        dropout = tables[0][1].dropout_prob if tables else DEFAULT_CLASS_DROPOUT
        for _, emb in tables:
            # Labels are dropped in compute_loss with the run's generator (resumable), not by the module.
            emb.dropout_prob = 0.0
        train_cfg = {k: scheduler_cfg[k] for k in ("num_train_timesteps", "beta_start", "beta_end", "beta_schedule",
                                                   "trained_betas") if scheduler_cfg.get(k) is not None}
        quantize.keep_4bit_layout(transformer)
        transformer.requires_grad_(False)
        vae.requires_grad_(False).eval()
        base_num_classes = int(transformer.config.num_embeds_ada_norm)
        scheduler = DDPMScheduler(**train_cfg, prediction_type="epsilon")
        return Components(
            model=transformer,
            scheduler=schedule_on_device(scheduler, device) if device is not None else scheduler,
            encoders={"vae": vae},
            extras={
                "scheduler_config": scheduler_cfg,
                "class_dropout_prob": float(dropout),
                "learned_sigma": transformer.config.out_channels == 2 * transformer.config.in_channels,
                "in_channels": int(transformer.config.in_channels),
                "null_class": base_num_classes,  # rows of the class table minus the null row (after inspect_samples)
                "base_num_classes": base_num_classes,
            },
        )

    def backbone_patterns(self, cfg: TrainConfig) -> list[str]:
        """--train_backbone, plus the class-embedding table when --num_classes resizes it.

        The backbone machinery then unfreezes it, casts it to fp32, gives it --backbone_learning_rate,
        checkpoints it and saves it to dit_lora_backbone.safetensors. Decided from the config alone, so
        LoRA setup does not depend on data preparation having run.
        """
        patterns = list(cfg.train_backbone)
        if cfg.family_options.num_classes is not None and CLASS_EMBEDDING_PATTERN not in patterns:
            patterns.append(CLASS_EMBEDDING_PATTERN)
        return patterns

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Build the label map; check (or, with --num_classes, resize) the class embedding.

        Without --num_classes, class names that are the model's own (ImageNet wnids, id2label synonyms) keep
        their pretrained rows; a dataset with exactly the model's class count takes rows in sorted-name order.
        """
        classes = sorted({s.caption for s in samples})
        model_classes = int(comps.model.config.num_embeds_ada_norm)
        label2id = None
        if cfg.family_options.num_classes is None:
            known = pretrained_labels(cfg, model_classes)
            label2id = map_to_pretrained(classes, known)
            if label2id is None and len(classes) != model_classes:
                raise class_count_error(classes, model_classes, cfg.pretrained_model_name_or_path, known)
        if cfg.family_options.num_classes is not None and cfg.family_options.num_classes < len(classes):
            raise UserError(
                f"--num_classes {cfg.family_options.num_classes} is smaller than the dataset's {len(classes)} classes; "
                "every "
                f"class needs its own row. Use --num_classes {len(classes)} (or more), or remove classes from the data."
            )
        target = model_classes if cfg.family_options.num_classes is None else cfg.family_options.num_classes
        if target != model_classes:
            resize_class_embeddings(comps.model, target, seed=cfg.seed, dtype=torch.float32)
            print(f"class embedding resized: {model_classes} -> {target} classes (+1 null class for guidance)",
                  flush=True)
        elif label2id is not None and len(classes) != model_classes:
            rows = ", ".join(f"{name} -> {label2id[name]}" for name in classes[:10]) + (", ..." if len(classes) > 10 else "")
            print(f"classes: the {len(classes)} class names are the model's own, so they keep their pretrained rows "
                  f"of the {model_classes}-class embedding (no resize): {rows}", flush=True)
        kept_pretrained_names = label2id is not None  # the names are the base model's own (wnids / synonyms)
        label2id = label2id or {name: i for i, name in enumerate(classes)}
        comps.extras.update(label2id=label2id, null_class=target, classes=classes,
                            kept_pretrained_names=kept_pretrained_names)
        if cfg.validation_prompt:
            unknown = [n for n in split_class_names(cfg.validation_prompt, label2id) if n not in label2id]
            if unknown:
                raise UserError(
                    f"--validation_prompt names {', '.join(repr(u) for u in unknown)}, which is not a class of the "
                    f"dataset. For DiT the prompt is a class name (several: comma-separated); classes: "
                    f"{', '.join(classes[:20])}{', ...' if len(classes) > 20 else ''}."
                )

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        path = cfg.pretrained_model_name_or_path
        return {
            "family": self.name,
            "model": os.path.abspath(path) if is_local(path) else path,
            "model_stamp": model_stamp(cfg, ("vae", "transformer")),
            "revision": cfg.revision,
            "variant": cfg.variant,
            "latents": "posterior_mean_fp32",
            # A changed label map must never reuse cached class ids.
            "classes": comps.extras.get("classes") if comps is not None else None,
        }

    # ---- encoding ------------------------------------------------------------------------
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        vae = comps.encoders["vae"]
        with torch.no_grad():
            latents = vae.encode(pixel_values.to(vae.device, torch.float32)).latent_dist.mode()
        shift = getattr(vae.config, "shift_factor", None) or 0.0
        return ((latents - shift) * vae.config.scaling_factor).float()

    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        """Class names -> ``{"class_labels": LongTensor}`` (+ ``negative_class_labels``: the null class).

        The loop encodes the validation prompt before the data is inspected; until the label map
        exists this returns ``{}`` and :meth:`generate` resolves the names itself.
        """
        label2id = comps.extras.get("label2id")
        if label2id is None:
            return {}
        unknown = [c for c in captions if c not in label2id]
        if unknown:
            raise UserError(f"Unknown class name(s) {unknown[:5]}; classes: {', '.join(list(label2id)[:20])}.")
        out = {"class_labels": torch.tensor([label2id[c] for c in captions], dtype=torch.long)}
        if with_negative:
            out["negative_class_labels"] = torch.full((len(captions),), comps.extras["null_class"], dtype=torch.long)
        return out

    # ---- loss ------------------------------------------------------------------------------
    def compute_loss(self, comps, denoiser, batch, generator, cfg):
        latents = batch["latents"]
        device, bsz = latents.device, latents.shape[0]
        scheduler = comps.scheduler
        noise = torch.randn(latents.shape, generator=generator, device=device, dtype=latents.dtype)
        timesteps = torch.randint(0, scheduler.config.num_train_timesteps, (bsz,), generator=generator, device=device)
        noisy = scheduler.add_noise(latents, noise, timesteps)
        labels = batch["class_labels"].to(device).long()
        drop = torch.rand(bsz, generator=generator, device=device) < comps.extras["class_dropout_prob"]
        labels = torch.where(drop, torch.full_like(labels, comps.extras["null_class"]), labels)
        pred = denoiser(noisy, timestep=timesteps, class_labels=labels, return_dict=False)[0]
        if comps.extras["learned_sigma"]:
            # As DiTPipeline: the first in_channels are epsilon, the rest the (here untrained) variance.
            pred = pred[:, : comps.extras["in_channels"]]
        return ((pred.float() - noise.float()) ** 2).mean()

    # ---- sampling --------------------------------------------------------------------------
    def _inference_scheduler(self, comps: Components):
        import diffusers

        config = dict(comps.extras.get("scheduler_config") or {})
        cls = getattr(diffusers, str(config.get("_class_name", "")), None) or diffusers.DDIMScheduler
        return cls.from_config(config)

    def generate(self, comps, denoiser, cond, cfg, seed):
        from diffusers import DiTPipeline

        label2id = comps.extras["label2id"]
        names = split_class_names(cfg.validation_prompt, label2id)
        ids = [label2id[n] for n in names for _ in range(cfg.num_validation_images)]
        device = next(denoiser.parameters()).device
        with self.vae_on(comps, device) as vae:
            pipe = DiTPipeline(transformer=denoiser, vae=vae, scheduler=self._inference_scheduler(comps))
            pipe.set_progress_bar_config(disable=True)
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                return pipe(class_labels=ids, guidance_scale=cfg.validation_guidance_scale,
                            num_inference_steps=cfg.validation_inference_steps, generator=generator).images

    # ---- saving and loading ----------------------------------------------------------------
    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """PEFT format (what ``PeftModel.save_pretrained`` writes); the label map is :meth:`save_adapter_extras`'."""
        from dit_lora.output.adapter import save_peft_adapter

        return save_peft_adapter(Path(output_dir), lora_state, lora_config, None)

    def save_adapter_extras(self, output_dir: Path, comps: Components, cfg: TrainConfig) -> None:
        """The base model in ``adapter_config.json`` and the label map :meth:`inspect_samples` built."""
        from dit_lora.output.adapter import set_peft_base_model

        output_dir = Path(output_dir)
        set_peft_base_model(output_dir, cfg.pretrained_model_name_or_path)
        extras = comps.extras
        classes = extras.get("classes")
        if classes is not None:
            info = {
                "classes": classes,
                "label2id": extras.get("label2id") or {name: i for i, name in enumerate(classes)},
                "num_classes": extras["null_class"],
                "null_class_index": extras["null_class"],
                "base_num_classes": extras.get("base_num_classes"),
                "class_embedding_pattern": CLASS_EMBEDDING_PATTERN,
                "pretrained_rows": bool(extras.get("kept_pretrained_names")),
            }
            (output_dir / CLASSES_FILE).write_text(json.dumps(info, indent=2) + "\n")

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Resize the class tables to the trained size and install the trained class names."""
        make_peft_capable(pipe.transformer)
        info = read_classes(adapter_dir)
        if info is None:
            return
        transformer = pipe.transformer
        if int(transformer.config.num_embeds_ada_norm) != int(info["num_classes"]):
            resize_class_embeddings(transformer, int(info["num_classes"]))  # values come from the backbone file
        label2id = {str(k): int(v) for k, v in info["label2id"].items()}
        if info.get("pretrained_rows"):
            # The pretrained rows were kept: the base model's own names stay valid beside the trained ones.
            pipe.labels = dict(sorted({**(getattr(pipe, "labels", None) or {}), **label2id}.items()))
            return
        pipe.labels = dict(sorted(label2id.items()))
        pipe.register_to_config(id2label={str(i): name for name, i in label2id.items()})

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        from diffusers import AutoencoderKL, DiTPipeline

        path = cfg.pretrained_model_name_or_path
        vae = AutoencoderKL.from_pretrained(path, subfolder="vae", revision=cfg.revision, **dtype_kwarg("diffusers", torch.float32),
                                            use_safetensors=True)
        pipe = DiTPipeline.from_pretrained(path, vae=vae, revision=cfg.revision, variant=cfg.variant, use_safetensors=True,
                                           **dtype_kwarg("diffusers", cfg.weight_dtype))
        attach_adapter(self, pipe, adapter_dir)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)

    def generate_with_pipeline(self, pipe, prompt, cfg, seed, num_images, comps=None):
        names = split_class_names(prompt, pipe.labels)
        ids = [i for i in pipe.get_label_ids(names) for _ in range(num_images)]
        device = pipe.transformer.device
        generator = torch.Generator(device=device).manual_seed(seed)
        # DiTPipeline hands the VAE latents in the transformer's dtype; with a bf16 transformer and the
        # fp32 VAE, autocast reconciles them (the same autocast the in-training validation runs under).
        mixed = pipe.transformer.dtype != pipe.vae.dtype
        with torch.no_grad(), torch.autocast(device.type, dtype=pipe.transformer.dtype, enabled=mixed):
            return pipe(class_labels=ids, guidance_scale=cfg.validation_guidance_scale,
                        num_inference_steps=cfg.validation_inference_steps, generator=generator).images

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        trained = _trained_classes(cfg)[0]
        classes = (split_class_names(cfg.validation_prompt, set(trained or [])) if cfg.validation_prompt
                   else (trained or ["class name"])[:1])
        return (
            "import torch\n"
            "from diffusers import DiTPipeline\n"
            "from dit_lora import load_adapter  # DiTPipeline has no load_lora_weights\n\n"
            f"base = \"{cfg.pretrained_model_name_or_path}\"\n"
            "dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32\n"
            "pipe = DiTPipeline.from_pretrained(base, torch_dtype=dtype)\n"
            f"load_adapter(pipe, \"{repo_or_dir}\")  # LoRA (PEFT format) + resized class embedding + class names\n"
            "pipe.to(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            f"class_ids = pipe.get_label_ids({json.dumps(classes)})  # pipe.labels lists the trained classes\n"
            "image = pipe(\n    class_labels=class_ids,\n"
            f"    num_inference_steps={cfg.validation_inference_steps}, guidance_scale={cfg.validation_guidance_scale},\n"
            "    generator=torch.manual_seed(0),\n"
            ").images[0]\n"
            "image.save(\"sample.png\")\n"
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        classes, num_classes = _trained_classes(cfg)
        classes = classes or []
        shown = ", ".join(classes[:20]) + (", ..." if len(classes) > 20 else "")
        return {"num_classes": num_classes, "classes": shown or None,
                "class_embedding": ("resized and trained" if cfg.family_options.num_classes is not None
                                    else "frozen (base model's)")}

    def base_model_license(self, cfg: TrainConfig) -> str | None:
        return "cc-by-nc-4.0" if cfg.pretrained_model_name_or_path.startswith("facebook/DiT") else None
