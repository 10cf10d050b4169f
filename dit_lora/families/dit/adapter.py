"""DiT's adapter: the kit's (:class:`~dit_lora.kit.adapter.KitAdapter` saves PEFT's own format, as
``DiTPipeline`` has no LoRA loader) beside the label map, the ``DiTPipeline`` reshaped to the trained class table
before it loads, and the model card's snippet, rows and license."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.contract.family import Components
from dit_lora.families.dit.classes import read_classes, split_class_names
from dit_lora.families.dit.embedding import (
    CLASS_EMBEDDING_PATTERN,
    resize_class_embeddings,
)
from dit_lora.families.dit.state import run_state
from dit_lora.kit.adapter import KitCard, Snippet, image_call_args, quoted
from dit_lora.kit.peft_capable import PeftFitting
from dit_lora.output.names import CLASSES_FILE

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, TrainConfig, TrainingOptions


def trained_classes(training: TrainingOptions) -> tuple[list[str] | None, int | None]:
    """(class names, class count) of the adapter the run saved in ``--output_dir`` (the model card's source;
    ``training``: the run's ``cfg.training``)."""
    info = read_classes(training.output_dir) if training.output_dir else None
    return (info["classes"], info["num_classes"]) if info else (None, None)


class DiTFitting(PeftFitting):
    """``FamilySpec.fitting``: a DiTPipeline given PEFT's methods, reshaped to the saved class table and given the
    trained names."""

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """PEFT's methods, the class tables resized to the trained size and the trained class names installed."""
        super().prepare_pipeline_for_adapter(pipe, adapter_dir)
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


class DiTAdapterExtras:
    """``FamilySpec.adapter_extras``: the run's label map beside the adapter."""

    def save_adapter_extras(self, output_dir: Path, comps: Components, options: FamilyOptions) -> None:
        """The label map the setup component built (``dit_lora_classes.json``)."""
        state = run_state(comps)
        if state.classes is not None:
            info = {
                "classes": state.classes,
                "label2id": state.label2id or {name: i for i, name in enumerate(state.classes)},
                "num_classes": state.null_class,
                "null_class_index": state.null_class,
                "base_num_classes": state.base_num_classes,
                "class_embedding_pattern": CLASS_EMBEDDING_PATTERN,
                "pretrained_rows": bool(state.kept_pretrained_names),
            }
            (Path(output_dir) / CLASSES_FILE).write_text(json.dumps(info, indent=2) + "\n")


class DiTCard(KitCard):
    """``FamilySpec.card``: the model card's snippet (``dit_lora.load_adapter``), the classes, Meta's license."""

    quote = staticmethod(quoted)
    load_comment = "  # LoRA (PEFT format) + resized class embedding + class names"

    def call_args(self, cfg: TrainConfig) -> list[str]:
        """The class ids, then the kit's steps, guidance and seed (DiTPipeline samples at its native size)."""
        return ["class_labels=class_ids,", *image_call_args(cfg.data, cfg.validation)[1:]]

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The kit's PEFT-format snippet in the dtype the machine has, the validation class's ids looked up first."""
        trained = trained_classes(cfg.training)[0]
        classes = (
            split_class_names(cfg.validation.prompts[0], set(trained or []))
            if cfg.validation.prompts
            else (trained or ["class name"])[:1]
        )
        return replace(
            super().snippet(cfg, repo_or_dir),
            before_pipe="dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32\n",
            dtype="dtype",
            before_call=f"class_ids = pipe.get_label_ids({json.dumps(classes)})  # pipe.labels lists the trained classes\n",
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The trained classes and whether the class embedding was resized."""
        classes, num_classes = trained_classes(cfg.training)
        classes = classes or []
        shown = ", ".join(classes[:20]) + (", ..." if len(classes) > 20 else "")
        return {
            "num_classes": num_classes,
            "classes": shown or None,
            "class_embedding": (
                "resized and trained" if cfg.family_options.num_classes is not None else "frozen (base model's)"
            ),
        }
