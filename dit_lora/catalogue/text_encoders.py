"""Published configs of the text encoders several families load, for their catalogue entries (a family's own
facts stay in its folder; an encoder two families ship is written once here, in ``text_encoders.json``).

Every catalogue data file may name these parts (``{"$part": "gemma2_2b"}``): Sana and SANA-Video ship Gemma-2-2B,
Qwen-Image and the Qwen2.5-VL video LLMs share Qwen2.5-VL's special token ids.
"""

from __future__ import annotations

from typing import Any

from dit_lora.core.datafile import read

#: the parts of ``text_encoders.json``, by name
PARTS: dict[str, Any] = read("dit_lora.catalogue", "text_encoders.json", ())["parts"]
#: google/gemma-2-2b-it's ``config.json`` as Sana's and SANA-Video's ``text_encoder/`` folders ship it
GEMMA2_2B: dict[str, Any] = PARTS["gemma2_2b"]
#: the Gemma tokenizer's files in those folders' ``tokenizer/``
GEMMA_TOKENIZER_FILES: tuple[str, ...] = tuple(PARTS["gemma_tokenizer_files"])
#: the special tokens of every Qwen2.5-VL size (the same ids in each Hub config.json, and in Qwen-Image's encoder)
QWEN2_5_VL_TOKEN_IDS: dict[str, int] = PARTS["qwen2_5_vl_token_ids"]
