"""Qwen3-VL test support: ``Qwen/Qwen3-VL-*-Instruct`` folders as the Hub lays them out, rebuilt offline from the
catalogue's configs.

A folder has the catalogue's ``config.json`` (real widths, heads, DeepStack layers and the full 151936-token
vocabulary; the language model cut to ``layers`` layers and the tower to ``vision_layers`` blocks, DeepStack kept on
the blocks that remain), random bf16 weights in sharded safetensors, ``generation_config.json``, Qwen's tokenizer
files (``<|vision_start|>`` 151652, ``<|video_pad|>`` 151656 ...) with the Instruct template in
``chat_template.json``, and the published ``video_preprocessor_config.json`` / ``preprocessor_config.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from real_layout import _save_weights, _write_json, qwen_tokenizer_files

from dit_lora.catalogue import by_hub_id
from dit_lora.families.videollm.demo_qwen3_vl import QWEN3_VL_CHAT_TEMPLATE

_PROCESSOR = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
              "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}


def qwen3_vl_folder(root: Path, hub_id: str = "Qwen/Qwen3-VL-2B-Instruct", layers: int = 1, vision_layers: int = 1,
                    seed: int = 0, experts: int | None = None) -> Path:
    """The ``hub_id`` repo's layout (module docstring) under ``root``; returns the folder. A MoE repo (``Qwen3-VL-
    30B-A3B``) keeps ``experts`` of its experts (at least its experts per token), each at the published size."""
    import transformers

    config = json.loads(json.dumps(by_hub_id(hub_id).configs["config.json"]))
    config["text_config"]["num_hidden_layers"] = layers
    if experts is not None:
        config["text_config"]["num_experts"] = experts
    config["vision_config"].update(depth=vision_layers, deepstack_visual_indexes=[vision_layers - 1])
    folder = root / hub_id.split("/")[-1]
    folder.mkdir(parents=True, exist_ok=True)
    architecture = config["architectures"][0]  # Qwen3VLForConditionalGeneration or Qwen3VLMoeForConditionalGeneration
    config_class = getattr(transformers, architecture.replace("ForConditionalGeneration", "Config"))
    _save_weights(config_class.from_dict(config), folder, architecture, seed)
    _write_json(folder / "config.json", config)  # as published (save_pretrained writes transformers' own spelling)
    _write_json(folder / "generation_config.json", {
        "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
        "temperature": 0.7, "top_k": 20, "top_p": 0.8})
    qwen_tokenizer_files(folder, template=QWEN3_VL_CHAT_TEMPLATE)
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template")  # the Qwen3-VL repos keep it in chat_template.json
    _write_json(folder / "tokenizer_config.json", tokenizer_config)
    _write_json(folder / "chat_template.json", {"chat_template": QWEN3_VL_CHAT_TEMPLATE})
    _write_json(folder / "video_preprocessor_config.json", {
        **_PROCESSOR, "size": {"longest_edge": 25165824, "shortest_edge": 4096},
        "video_processor_type": "Qwen3VLVideoProcessor"})
    _write_json(folder / "preprocessor_config.json", {
        **_PROCESSOR, "size": {"longest_edge": 16777216, "shortest_edge": 65536},
        "image_processor_type": "Qwen2VLImageProcessor"})
    return folder
