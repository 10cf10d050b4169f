#!/usr/bin/env bash
# One lent GPU's checks for issue 48's video families, in one time-boxed call (results in $OUT):
#  - on the CPU meanwhile: LTX-2's Hub-layout folder (48 blocks, 19B, random bf16 weights) is built;
#  - on the GPU meanwhile: FLUX.1's CUDA test (issue 47's open question, tests/families/flux/test_cuda.py), the LTX-2
#    demos (text- and image-to-video, with sound) and the bare HunyuanVideo 1.5 step at 480p;
#  - then LTX-2 through dit-lora's loop at its published size with the plan's 24 GB flags (89 frames), and, when
#    time is left, its 32 GB flags (121 frames).
#   bash benchmarks/common/gpu_video_checks.sh        # wheels the machine lacks in .whl/ (benchmarks/RESULTS.md)
set -u
source "$(dirname "$0")/gpu_env.sh" /tmp/gpu_video_checks
export DIT_LORA_SKIP_ENV_CHECK=1
deadline=$((SECONDS + ${BUDGET:-540}))
free -g | head -2; df -h /tmp | tail -1; nproc
mkdir -p "$OUT/demos"
(piece 260 ltx2-build python3 benchmarks/common/family_step_gpu.py --family ltx2 --build_only /tmp/ltx2 \
  > "$OUT/demos/build.log" 2>&1) &
build=$!
demo() {  # demo NAME CONFIG: one LTX-2 demo on CUDA in its own folders, its log in $OUT/demos
  local start=$SECONDS
  OMP_NUM_THREADS=2 timeout --kill-after=5 170 python3 -m dit_lora launch recipes/ltx2_lora.py --config "$2" \
    --train_data_dir ".dit_lora_demo/clips-$1" --cache_dir ".dit_lora_demo/cache-$1" \
    --output_dir ".dit_lora_demo/output-$1" --pretrained_model_name_or_path ".dit_lora_demo/tiny-$1" \
    > "$OUT/demos/$1.log" 2>&1
  echo "demo $1: exit $? after $((SECONDS - start))s" >> "$OUT/demos/summary.txt"
}
demo ltx2 recipes/configs/ltx2/demo.yaml &
demo ltx2_i2v recipes/configs/ltx2/i2v_demo.yaml &
piece 100 flux-cuda python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs --timeout 90 tests/families/flux/test_cuda.py
piece 170 hv15-step python3 benchmarks/hunyuanvideo15/step_gpu.py --out "$OUT/hv15_step_gpu.json"
wait
cat "$OUT/demos/summary.txt" "$OUT/demos/build.log" | grep -v "it/s]"
(cd "$OUT/demos" && tar czf ../demos.tgz ./*.log && rm -rf "$OUT/demos")
LTX=(python3 benchmarks/common/family_step_gpu.py --family ltx2 --folder /tmp/ltx2/LTX-2 --steps 6 --warmup 2)
SAME="--rank 32 --max_sequence_length 1024 --quantize_base fp8_scaled --activation_offloading true"
piece $((deadline - SECONDS)) ltx2-24gb "${LTX[@]}" --frames 89 --extra "$SAME --blocks_to_swap 47" \
  --out "$OUT/ltx2_24gb_step_gpu.json"
left=$((deadline - SECONDS))
if [ $left -gt 120 ]; then
  piece $left ltx2-32gb "${LTX[@]}" --frames 121 --extra "$SAME" --out "$OUT/ltx2_32gb_step_gpu.json"
else
  echo "=== ltx2-32gb: not run, ${left}s left"
fi
