"""config/peers_memory.py: the keys of the peers' low-memory configs name their dit-lora counterparts."""

import pytest

from dit_lora.config import owners
from dit_lora.config.parser import parse_config
from dit_lora.config.peers import peer_hint
from dit_lora.core.errors import UserError

#: each low-memory key of the peers (peers_memory.py) -> what its hint must say
LOW_MEMORY_HINTS = {
    "transformer_dtype": ("dit-lora's option is --quantize_base",),
    "diffusion_model_dtype": ("--quantize_base",),
    "activation_checkpointing": ("--gradient_checkpointing true --activation_offloading true",),
    "micro_batch_size_per_gpu": ("dit-lora's option is --train_batch_size",),
    "pipeline_stages": ("FSDP2",),
    "qtype": ("fp8_scaled", "nf4", "int8"),
    "qtype_te": ("--quantize_text_encoder",),
    "fp8_vl": ("--quantize_text_encoder",),
    "fp8_text_encoder": ("--quantize_text_encoder",),
    "unload_text_encoder": ("no dit-lora equivalent",),
    "cache_text_embeddings": ("--cache_latents",),
    "layer_offloading_transformer_percent": ("--blocks_to_swap",),
    "split_attn": ("no dit-lora equivalent",),
    "offload_fraction": ("--blocks_to_swap 6",),  # OneTrainer's share, as a number
    "weight_dtype": ("OneTrainer", "fp8_scaled", "--quantize_text_encoder"),
    "lora_rank": ("OneTrainer",),
    "batch_size": ("OneTrainer",),
}


def test_the_peers_low_memory_configs_translate():
    """The keys of musubi-tuner's, ai-toolkit's, diffusion-pipe's and OneTrainer's low-memory configs
    (peers_memory.py) were unknown: `--transformer_dtype float8` got a bare "unknown option" and no word of
    --quantize_base."""
    common = sorted(owners.common_names())
    for key, expected in LOW_MEMORY_HINTS.items():
        hint = peer_hint(key, common)
        assert hint and all(part in hint for part in expected), (key, hint)
    with pytest.raises(UserError) as err:
        parse_config(["--family", "wan", "--transformer_dtype", "float8"], needs_data=False)
    assert "--quantize_base fp8_scaled" in str(err.value) and "Traceback" not in str(err.value)
