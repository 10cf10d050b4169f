"""DiT's encoders (the AutoencoderKL's posterior mean; class names to class ids) and its setup component, which
builds the run's label map from the screened samples and checks (or, with ``--num_classes``, resizes) the class
embedding."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.dit.classes import pretrained_rows, split_class_names
from dit_lora.families.dit.embedding import resize_class_embeddings
from dit_lora.families.dit.state import run_state
from dit_lora.kit.components import DiffusionEncoders, DiffusionSetup
from dit_lora.kit.latents import model_identity

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class DiTEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: images to scaled VAE latents, class names to the run's class ids."""

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its VAE and transformer files, and the run's class list (a changed label map must never reuse
        cached class ids)."""
        return {
            "family": "dit",
            **model_identity(cfg, stamped=("vae", "transformer")),
            "latents": "posterior_mean_fp32",
            "classes": run_state(comps).classes if comps is not None else None,
        }

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Class names -> ``{"class_labels": LongTensor}`` (+ ``negative_class_labels``: the null class).

        The loop encodes the validation prompt before the data is inspected; until the label map
        exists this returns ``{}`` and the samples component resolves the names itself.
        """
        state = run_state(comps)
        label2id = state.label2id
        if label2id is None:
            return {}
        unknown = [c for c in captions if c not in label2id]
        if unknown:
            raise UserError(f"Unknown class name(s) {unknown[:5]}; classes: {', '.join(list(label2id)[:20])}.")
        out = {"class_labels": torch.tensor([label2id[c] for c in captions], dtype=torch.long)}
        if with_negative:
            out["negative_class_labels"] = torch.full((len(captions),), state.null_id(), dtype=torch.long)
        return out


class DiTSetup(DiffusionSetup):
    """``FamilySpec.setup``: the label map built from the screened samples, recorded in the run's ``DiTRun``."""

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Build the label map; check (or, with --num_classes, resize) the class embedding.

        Without --num_classes, class names that are the model's own (ImageNet wnids, id2label synonyms) keep
        their pretrained rows; a dataset with exactly the model's class count takes rows in sorted-name order.
        """
        classes = sorted({s.caption for s in samples})
        # DiT's transformer is a diffusers model: its config (a FrozenDict) reads by attribute
        model_classes = int(cast(Any, comps.model).config.num_embeds_ada_norm)
        num_classes = cfg.family_options.num_classes
        label2id = None
        if num_classes is None:
            label2id = pretrained_rows(cfg, classes, model_classes)
        if num_classes is not None and num_classes < len(classes):
            raise UserError(
                f"--num_classes {num_classes} is smaller than the dataset's {len(classes)} classes; every class "
                f"needs its own row. Use --num_classes {len(classes)} (or more), or remove classes from the data."
            )
        target = model_classes if num_classes is None else num_classes
        if target != model_classes:
            resize_class_embeddings(comps.model, target, seed=cfg.training.seed, dtype=torch.float32)
            print(
                f"class embedding resized: {model_classes} -> {target} classes (+1 null class for guidance)", flush=True
            )
        elif label2id is not None and len(classes) != model_classes:
            rows = ", ".join(f"{name} -> {label2id[name]}" for name in classes[:10]) + (
                ", ..." if len(classes) > 10 else ""
            )
            print(
                f"classes: the {len(classes)} class names are the model's own, so they keep their pretrained rows "
                f"of the {model_classes}-class embedding (no resize): {rows}",
                flush=True,
            )
        state = run_state(comps)
        state.kept_pretrained_names = label2id is not None  # the names are the base model's own (wnids / synonyms)
        state.label2id = label2id or {name: i for i, name in enumerate(classes)}
        state.null_class, state.classes = target, classes
        self._check_validation_prompt(cfg, state.label2id, classes)

    def _check_validation_prompt(self, cfg: TrainConfig, label2id: dict[str, int], classes: list[str]) -> None:
        """Every class the validation prompt names is one of the dataset's."""
        names = [n for prompt in cfg.validation.prompts for n in split_class_names(prompt, label2id)]
        unknown = list(dict.fromkeys(n for n in names if n not in label2id))
        if unknown:
            raise UserError(
                f"--validation_prompt names {', '.join(repr(u) for u in unknown)}, which is not a class of the "
                f"dataset. For DiT the prompt is a class name (several: comma-separated); classes: "
                f"{', '.join(classes[:20])}{', ...' if len(classes) > 20 else ''}."
            )
