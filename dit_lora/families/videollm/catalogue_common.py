"""What the video-LLM catalogue entries share: the LLaMA-Factory LoRA defaults and one ``Checkpoint`` shape (one
``config.json`` matched by its identity keys, bf16 weights, the defaults and their sources), for ``catalogue.py``,
``catalogue_internvl.py``, ``catalogue_qwen3_vl.py`` and ``catalogue_qwen3_vl_moe.py``."""

from __future__ import annotations

from typing import Any

from dit_lora.catalogue.entry import Checkpoint

#: LLaMA-Factory ``examples/train_lora`` (no video-LLM publisher has a LoRA recipe of its own)
LLAMA_FACTORY_DEFAULTS: dict[str, Any] = {
    "rank": 8,
    "lora_alpha": 16,
    "learning_rate": 1e-4,
    "train_batch_size": 1,
    "gradient_accumulation_steps": 8,
}
LLAMA_FACTORY_SOURCE = (
    "LLaMA-Factory examples/train_lora (lora_rank 8, alpha 2 x rank, lr 1e-4, batch 1 x accumulation 8)"
)


def video_llm_checkpoint(
    *,
    hub_id: str,
    family: str,
    title: str,
    identity: dict[str, Any],
    depth: dict[str, Any],
    config: dict[str, Any],
    text_length: int,
    tokenizer_files: tuple[str, ...],
    notes: str = "",
    defaults: dict[str, Any] = LLAMA_FACTORY_DEFAULTS,
    defaults_source: str = LLAMA_FACTORY_SOURCE,
) -> Checkpoint:
    """A video LLM's entry: ``config.json`` (``config``) told apart by ``identity`` and ``depth``, bf16 weights, a
    copy of ``defaults`` and its source, the configs' source the module docstring."""
    return Checkpoint(
        hub_id=hub_id,
        family=family,
        title=title,
        signature={"config.json": identity},
        depth={"config.json": depth},
        configs={"config.json": config},
        stored_dtype="bf16",
        text_length=text_length,
        defaults=dict(defaults),
        sources={"defaults": defaults_source, "configs": "Hub config.json (module docstring)"},
        tokenizer_files=tokenizer_files,
        notes=notes,
    )
