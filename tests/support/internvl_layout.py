"""InternVL3.5 test support: ``OpenGVLab/InternVL3_5-*-HF`` folders as the Hub lays them out, rebuilt offline from the
catalogue's configs.

A folder has the catalogue's ``config.json`` (real widths, heads and the full 151936-token vocabulary; the language
model and the vision tower cut to ``layers`` / ``vision_layers``), random bf16 weights in sharded safetensors (or
none: ``weights=False``, for what reads configs only, such as the memory plan), ``generation_config.json``, Qwen3's
tokenizer file set with InternVL's tokens at the ids the config names (``<img>`` 151669, ``</img>`` 151670,
``<IMG_CONTEXT>`` 151671 = ``image_token_id``; ``<video>`` after ``</box>``), ``chat_template.jinja`` (the template
is not in ``tokenizer_config.json``, as in the HF repos), ``processor_config.json`` and the published
``preprocessor_config.json`` / ``video_preprocessor_config.json`` (448 x 448, ImageNet mean/std, bicubic).
"""

from __future__ import annotations

import json
from pathlib import Path

from real_layout import QWEN_ADDED_TOKENS, QWEN_FIRST_ADDED_ID, _save_weights, _write_json, qwen_tokenizer_files

from dit_lora.catalogue import by_hub_id
from dit_lora.families.videollm.demo_internvl import EXTRA_SPECIAL_TOKENS, INTERNVL_CHAT_TEMPLATE

#: Qwen3's tokens after Qwen2.5's, then InternVL's (special), in the order of the InternVL3.5 tokenizers
ADDED_AFTER_QWEN25 = (("<tool_response>", False), ("</tool_response>", False), ("<think>", False),
                      ("</think>", False), ("<img>", True), ("</img>", True), ("<IMG_CONTEXT>", True), ("<quad>", True),
                      ("</quad>", True), ("<ref>", True), ("</ref>", True), ("<box>", True), ("</box>", True),
                      ("<video>", True))
_VIDEO_PREPROCESSOR = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
                       "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "initial_shift": True,
                       "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"height": 448, "width": 448},
                       "crop_size": None, "do_center_crop": None, "processor_class": "InternVLProcessor",
                       "video_processor_type": "InternVLVideoProcessor"}


def internvl_tokenizer_files(folder: Path) -> dict[str, int]:
    """Qwen's tokenizer files (real_layout.qwen_tokenizer_files) grown by :data:`ADDED_AFTER_QWEN25` at their ids,
    with InternVL's ``extra_special_tokens`` and the template in ``chat_template.jinja``; returns the added ids."""
    from tokenizers import AddedToken, Tokenizer

    qwen_tokenizer_files(folder, template=INTERNVL_CHAT_TEMPLATE)
    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    first = QWEN_FIRST_ADDED_ID + len(QWEN_ADDED_TOKENS)
    for token, special in ADDED_AFTER_QWEN25:
        backend.add_tokens([AddedToken(token, special=special, normalized=False)])
    ids = {t: first + i for i, (t, _) in enumerate(ADDED_AFTER_QWEN25)}
    assert {t: backend.token_to_id(t) for t in ids} == ids, "added tokens did not get the real ids"
    backend.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    config["added_tokens_decoder"].update({str(i): {
        "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": s}
        for (t, s), i in zip(ADDED_AFTER_QWEN25, ids.values())})
    config.update(extra_special_tokens=dict(EXTRA_SPECIAL_TOKENS), model_max_length=8192, processor_class=
                  "InternVLProcessor")
    _write_json(folder / "tokenizer_config.json", config)
    added = json.loads((folder / "added_tokens.json").read_text())
    _write_json(folder / "added_tokens.json", dict(sorted({**added, **ids}.items())))
    (folder / "chat_template.jinja").write_text(INTERNVL_CHAT_TEMPLATE)
    return ids


def internvl_folder(root: Path, hub_id: str = "OpenGVLab/InternVL3_5-1B-HF", layers: int = 1, vision_layers: int = 1,
                    seed: int = 0, weights: bool = True) -> Path:
    """The ``hub_id`` repo's layout (module docstring) under ``root``, ``layers`` deep; returns the folder."""
    from transformers import InternVLConfig

    config = json.loads(json.dumps(by_hub_id(hub_id).configs["config.json"]))
    config["text_config"].update(num_hidden_layers=layers, max_window_layers=layers)
    config["vision_config"]["num_hidden_layers"] = vision_layers
    folder = root / hub_id.split("/")[-1]
    folder.mkdir(parents=True, exist_ok=True)
    if weights:
        _save_weights(InternVLConfig.from_dict(config), folder, "InternVLForConditionalGeneration", seed)
    _write_json(folder / "config.json", config)  # as published (save_pretrained writes transformers' own spelling)
    _write_json(folder / "generation_config.json", {"bos_token_id": 151643, "eos_token_id": 151645,
                                                    "pad_token_id": 151643})
    ids = internvl_tokenizer_files(folder)
    assert ids["<IMG_CONTEXT>"] == config["image_token_id"]
    _write_json(folder / "processor_config.json", {"image_seq_length": 256, "processor_class": "InternVLProcessor"})
    _write_json(folder / "video_preprocessor_config.json", _VIDEO_PREPROCESSOR)
    _write_json(folder / "preprocessor_config.json", {
        **{k: v for k, v in _VIDEO_PREPROCESSOR.items() if k not in ("video_processor_type", "initial_shift")},
        "crop_to_patches": True, "max_patches": 12, "min_patches": 1, "image_processor_type": "GotOcr2ImageProcessor"})
    return folder
