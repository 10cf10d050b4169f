"""Published configs of the text encoders several families load, for their catalogue entries (a family's own
facts stay in its folder; an encoder two families ship is written once here)."""

from __future__ import annotations

from typing import Any

#: google/gemma-2-2b-it's ``config.json`` as Sana's and SANA-Video's ``text_encoder/`` folders ship it
GEMMA2_2B: dict[str, Any] = {
    "architectures": ["Gemma2Model"],
    "model_type": "gemma2",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
    "sliding_window": 4096,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_theta": 10000.0,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": [1, 107],
    "torch_dtype": "bfloat16",
}
#: the Gemma tokenizer's files in those folders' ``tokenizer/``
GEMMA_TOKENIZER_FILES = ("special_tokens_map.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json")
