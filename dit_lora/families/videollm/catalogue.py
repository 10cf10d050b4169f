"""The video LLMs' catalogue entries and shared parts, for the per-architecture catalogue modules
(``catalogue.json`` beside this module holds them and, under ``provenance``, where each fact was checked).
"""

from __future__ import annotations

from dit_lora.catalogue.files import catalogue_of

_FILE = catalogue_of(__package__)
#: every video-LLM entry, in the file's order: LLaVA-NeXT-Video, Qwen2.5-VL, InternVL3.5, Qwen3-VL, Qwen3-VL MoE
ENTRIES = _FILE.entries
#: the file's parts by name (``llama_factory_defaults`` and ``llama_factory_source`` for catalogue_common.py)
PARTS = _FILE.parts
