"""config/optimizer_state.py: each optimizer's state bytes as the plan counts them (the device-side optimizers' counts
are also checked against their own tensors: tests/training/test_adafactor.py, test_came.py, test_lowbit_adam.py)."""

from dit_lora.config.optimizer_state import (
    adafactor_state_bytes,
    adam_moment_bytes,
    came_state_bytes,
    lowbit_adam_state_bytes,
    prodigy_state_bytes,
)


def test_8bit_adam_moments_are_bitsandbytes_sizes():
    """bitsandbytes' AdamW8bit: a byte per element and moment plus an fp32 absmax per 256, fp32 under 4,096."""
    lora_a, small = 32 * 5120, 16 * 32  # Wan 14B's rank-32 A matrix; a tensor bitsandbytes keeps in 32 bits
    assert adam_moment_bytes([lora_a, small], eight_bit=False) == 8 * (lora_a + small)
    assert adam_moment_bytes([lora_a], eight_bit=True) == 2 * lora_a + 2 * 4 * (lora_a // 256)
    assert adam_moment_bytes([small], eight_bit=True) == 8 * small
    assert adam_moment_bytes([257 * 16], eight_bit=True) == 2 * 257 * 16 + 2 * 4 * 17  # a last block begun


def test_prodigy_keeps_four_fp32_values_per_weight():
    assert prodigy_state_bytes([10, 3]) == 16 * 13 == 2 * adam_moment_bytes([10, 3], eight_bit=False)


def test_the_factored_optimizers_keep_a_row_and_a_column_per_matrix():
    """A 64 x 32 matrix and a 1-D tensor of 5: Adafactor keeps 64 + 32 second moments (a vector its 5) and two
    scalars each, plus a first moment with beta1; CAME a first moment, two factored pairs and a step count."""
    shapes = [(64, 32), (5,)]
    assert adafactor_state_bytes(shapes, first_moment=None) == 4 * (64 + 32) + 12 + 4 * 5 + 12
    assert adafactor_state_bytes(shapes, first_moment=0.9) == adafactor_state_bytes(
        shapes, first_moment=None) + 4 * (64 * 32 + 5)
    assert came_state_bytes(shapes) == (4 * 64 * 32 + 8 * (64 + 32) + 8) + (4 * 5 + 4 * 5 + 8)


def test_torchaos_low_bit_moments_are_quantized_from_4096_values_in_whole_blocks():
    quantized, odd = 4096, 4096 + 1  # a whole number of blocks; one value more: kept in fp32
    assert lowbit_adam_state_bytes([quantized], bits=8) == 2 * (4096 + 4 * 16 + 4 * 256) + 4
    assert lowbit_adam_state_bytes([quantized], bits=4) == 2 * (2048 + 4 * 32 + 4 * 16) + 4
    assert lowbit_adam_state_bytes([odd], bits=8) == 2 * 4 * odd + 4
