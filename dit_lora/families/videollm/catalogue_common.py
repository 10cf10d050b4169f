"""What the video-LLM catalogue entries share: the LLaMA-Factory LoRA defaults and one ``Checkpoint`` shape (one
``config.json`` matched by its identity keys, bf16 weights, the defaults and their sources). The entries themselves
are data now (``catalogue.json``, which states that shape per entry); :func:`video_llm_checkpoint` builds one in code."""

from __future__ import annotations

from typing import Any

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.families.videollm.catalogue import PARTS

#: LLaMA-Factory ``examples/train_lora`` (no video-LLM publisher has a LoRA recipe of its own): parts of the
#: family's ``catalogue.json``, which its entries name
LLAMA_FACTORY_DEFAULTS: dict[str, Any] = PARTS["llama_factory_defaults"]
LLAMA_FACTORY_SOURCE: str = PARTS["llama_factory_source"]


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
