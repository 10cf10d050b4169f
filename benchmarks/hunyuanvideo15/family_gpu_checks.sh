#!/usr/bin/env bash
# One lent GPU's checks for the hunyuanvideo15 family (issue 48), in one time-boxed call (results in $OUT):
#  - on the CPU meanwhile: the 480p text-to-video Hub-layout folder (54 blocks, 8.3B, random bf16 weights) is built;
#  - on the GPU meanwhile: both offline demos (text- and image-to-video) through `dit-lora launch`;
#  - then the family's own step (dit-lora's loop) at 480p with the plan's 24 GB answer
#    (`dit-lora plan ... --gpu_memory 24GB`: fp8_scaled base, nf4 text encoder, activation offloading, 53 frames),
#    and, when time is left, its 32 GB answer (the same flags at 89 frames).
#   bash benchmarks/hunyuanvideo15/family_gpu_checks.sh        # wheels the machine lacks in .whl/
set -u
source "$(dirname "$0")/../common/gpu_env.sh" /tmp/hv15_family_checks
export DIT_LORA_SKIP_ENV_CHECK=1
deadline=$((SECONDS + ${BUDGET:-540}))
mkdir -p "$OUT/demos"
(piece 300 hv15-build python3 benchmarks/common/family_step_gpu.py --family hunyuanvideo15 --build_only /tmp/hv15 \
  > "$OUT/demos/build.log" 2>&1) &
build=$!
demo() {  # demo NAME CONFIG: one demo on CUDA in its own folders, its log in $OUT/demos
  local start=$SECONDS
  OMP_NUM_THREADS=2 timeout --kill-after=5 170 python3 -m dit_lora launch recipes/hunyuanvideo15_lora.py --config "$2" \
    --output_dir ".dit_lora_demo/output-$1" > "$OUT/demos/$1.log" 2>&1
  echo "demo $1: exit $? after $((SECONDS - start))s" >> "$OUT/demos/summary.txt"
}
demo hv15 recipes/configs/hunyuanvideo15/demo.yaml &
demo hv15_i2v recipes/configs/hunyuanvideo15/i2v_demo.yaml &
wait
cat "$OUT/demos/summary.txt" "$OUT/demos/build.log" | grep -v "it/s]"
# --optimizer adamw vs prodigy (and prodigyopt's, from .whl/): one update of a LoRA's weights on the GPU (issue 49)
piece 40 optimizers python3 benchmarks/levers/optimizers_cpu.py --device cuda --steps 20 --out "$OUT/optimizers_gpu.json"
HV=(python3 benchmarks/common/family_step_gpu.py --family hunyuanvideo15
    --folder /tmp/hv15/HunyuanVideo-1.5-Diffusers-480p_t2v --steps 6 --warmup 2)
SAME="--quantize_base fp8_scaled --quantize_text_encoder true --activation_offloading true"
piece $((deadline - SECONDS)) hv15-24gb "${HV[@]}" --frames 53 --extra "$SAME" \
  --out "$OUT/hv15_24gb_step_gpu.json"
left=$((deadline - SECONDS))
if [ $left -gt 120 ]; then
  piece $left hv15-32gb "${HV[@]}" --frames 89 --extra "$SAME" --out "$OUT/hv15_32gb_step_gpu.json"
else
  echo "=== hv15-32gb: not run, ${left}s left"
fi
