"""DiT's class-embedding tables: finding them, resizing them to a dataset's class count (the null row for guidance
kept last), and mapping ``DiTPipeline``'s hard-coded null id onto a resized table (used by training and by
``dit_lora.load_adapter``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.core.errors import UserError

if TYPE_CHECKING:
    from diffusers.configuration_utils import ConfigMixin
    from diffusers.models.embeddings import LabelEmbedding

#: the class id DiTPipeline feeds for the unconditional half of classifier-free guidance
PIPELINE_NULL_CLASS = 1000
#: regex (``--train_backbone``) of every block's class-embedding table
CLASS_EMBEDDING_PATTERN = r"\.class_embedder\.embedding_table\.weight$"
#: DiT's label-dropout probability for guidance (diffusers' CombinedTimestepLabelEmbeddings default)
DEFAULT_CLASS_DROPOUT = 0.1


def label_embeddings(model: torch.nn.Module) -> list[tuple[str, LabelEmbedding]]:
    """``(name, LabelEmbedding)`` of every block (diffusers gives each DiT block its own table)."""
    # Diffusers' model modules import slowly: only once a model exists
    from diffusers.models.embeddings import LabelEmbedding

    return [(n, m) for n, m in model.named_modules() if isinstance(m, LabelEmbedding)]


def _map_pipeline_null(module, args):
    """Forward pre-hook: DiTPipeline's hard-coded null id 1000 -> this (resized) table's null row."""
    labels = args[0]
    if module.num_classes != PIPELINE_NULL_CLASS and torch.is_tensor(labels):
        labels = torch.where(labels == PIPELINE_NULL_CLASS, module.num_classes, labels)
    return (labels, *args[1:])


def resize_class_embeddings(
    model: torch.nn.Module, num_classes: int, *, seed: int = 0, dtype: torch.dtype | None = None
) -> None:
    """Resize every block's class table to ``num_classes`` + 1 rows, the null (guidance) row last.

    New class rows ~ N(mean, std) of the old class rows, per dimension (one generator seeded with ``seed`` per
    table, so tables that were copies stay copies); the old null row is copied. ``dtype`` defaults to the old
    table's dtype. Updates ``num_embeds_ada_norm`` in the model config and maps DiTPipeline's null id 1000 to the
    new null row.
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
            cast(Any, emb)._dit_lora_null_hook = True  # a plain flag; Module's types take tensors
    # DiT's transformer is a diffusers model: its config is a ConfigMixin's
    cast("ConfigMixin", model).register_to_config(num_embeds_ada_norm=num_classes)
