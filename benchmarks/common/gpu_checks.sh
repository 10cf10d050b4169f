#!/usr/bin/env bash
# One lent-GPU session's checks in one call (the device tool's machines: torch and CUDA there, no registry):
# the `gpu`-marked tests, then the lever benchmarks at real sizes with --device cuda, then the Sana/CogVideoX steps
# whose recorded peaks were the benchmark's fp32 build. Each piece is time-boxed so one hang cannot eat the lease;
# results land in $OUT (at most 8 files come back: the log and seven JSONs).
#   bash benchmarks/common/gpu_checks.sh            # wheels for what the machine lacks in .whl/ (benchmarks/RESULTS.md)
set -u
source "$(dirname "$0")/gpu_env.sh" /tmp/gpu_checks
piece 150 gpu-tests python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs --timeout 90 \
  tests/modeling/test_block_swap.py tests/modeling/test_activation_offload.py tests/modeling/test_cache_parking.py \
  tests/modeling/test_quantize.py tests/training/test_ema.py tests/kernels/test_attention.py \
  tests/e2e/test_guard_drills.py tests/families/wan/test_experts.py tests/training/test_fsdp2.py
piece 60 block-swap python3 benchmarks/levers/block_swap_cpu.py --device cuda --layers 28 --resolution 1024 \
  --batch 4 --steps 5 --warmup 2 --out "$OUT/block_swap_gpu.json"
piece 60 activation-offload python3 benchmarks/levers/activation_offload_cpu.py --device cuda --layers 28 \
  --resolution 1024 --batch 4 --steps 5 --warmup 2 --out "$OUT/activation_offload_gpu.json"
piece 75 fp8-scaled python3 benchmarks/levers/fp8_scaled_cpu.py --device cuda --model wan1.3b --layers 30 \
  --frames 21 --height 60 --width 104 --text_tokens 512 --steps 3 --warmup 1 --out "$OUT/fp8_scaled_gpu.json"
piece 50 sana-step python3 benchmarks/sana/step_gpu.py --batch_sizes 4 --gradient_checkpointing on --steps 10 \
  --warmup_steps 3 --out "$OUT/sana_step_gpu.json"
piece 60 cogvideox-step python3 benchmarks/cogvideox/step_gpu.py --models 5b --steps 5 --warmup_steps 2 \
  --out "$OUT/cogvideox_step_gpu.json"
piece 45 ema python3 benchmarks/levers/ema_cpu.py --device cuda --model sana600m --layers 28 --resolution 1024 \
  --batch 4 --steps 5 --warmup 2 --out "$OUT/ema_gpu.json"
piece 45 adapter-types python3 benchmarks/adapters/types_cpu.py --device cuda --model 600m --layers 28 --resolution 1024 \
  --batch 4 --steps 5 --warmup 2 --out "$OUT/types_gpu.json"
