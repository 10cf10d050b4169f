#!/usr/bin/env bash
# One lent GPU's checks of the families added after the kit (issue 47), in one time-boxed call: the `gpu`-marked
# tests (FLUX.1's first), every new family's demo on CUDA (all at once, each in its own folders), then FLUX.1 [dev]
# at its published depth, 1024 px, through dit-lora's loop with the family's defaults and with the plan's 24 GB
# answer (--quantize_base fp8_scaled). Results land in $OUT (the log, the demos' logs, two JSONs).
#   bash benchmarks/common/gpu_family_checks.sh        # wheels the machine lacks in .whl/ (benchmarks/RESULTS.md)
set -u
source "$(dirname "$0")/gpu_env.sh" /tmp/gpu_family_checks
# the image has no PyAV, which the environment check requires and these image demos never call
demo() {  # demo NAME RECIPE CONFIG: one demo on CUDA in its own folders, its log in $OUT/demos
  local start=$SECONDS
  DIT_LORA_SKIP_ENV_CHECK=1 OMP_NUM_THREADS=2 timeout --kill-after=5 170 python3 -m dit_lora launch "recipes/$2" --config "$3" \
    --train_data_dir ".dit_lora_demo/shapes-$1" --cache_dir ".dit_lora_demo/cache-$1" \
    --output_dir ".dit_lora_demo/output-$1" > "$OUT/demos/$1.log" 2>&1
  echo "demo $1: exit $? after $((SECONDS - start))s" >> "$OUT/demos/summary.txt"
}
# first the decisive checks: FLUX.1's blocks on CUDA with and without dit-lora's loop (tests/families/flux/test_cuda.py)
piece 130 gpu-tests python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs --timeout 90 tests/families/flux/test_cuda.py \
  tests/modeling/test_block_swap.py tests/modeling/test_activation_offload.py tests/modeling/test_cache_parking.py \
  tests/modeling/test_quantize.py tests/training/test_ema.py tests/kernels/test_attention.py \
  tests/e2e/test_guard_drills.py tests/families/wan/test_experts.py tests/training/test_fsdp2.py
mkdir -p "$OUT/demos"
demo flux flux_lora.py recipes/configs/flux/demo.yaml &
demo kontext flux_lora.py recipes/configs/flux/kontext_demo.yaml &
demo chroma chroma_lora.py recipes/configs/chroma/demo.yaml &
demo lumina2 lumina2_lora.py recipes/configs/lumina2/demo.yaml &
demo krea2 krea2_lora.py recipes/configs/krea2/demo.yaml &
demo ideogram4 ideogram4_lora.py recipes/configs/ideogram4/demo.yaml &
piece 200 flux-build python3 benchmarks/common/family_step_gpu.py --family flux --build_only /tmp/flux_dev
wait
cat "$OUT/demos/summary.txt"
(cd "$OUT/demos" && tar czf ../demos.tgz ./*.log && rm -rf "$OUT/demos")
piece 130 flux-dev python3 benchmarks/common/family_step_gpu.py --family flux --folder /tmp/flux_dev/FLUX.1-dev \
  --steps 10 --warmup 3 --out "$OUT/flux_dev_step_gpu.json"
piece 150 flux-dev-fp8 python3 benchmarks/common/family_step_gpu.py --family flux --folder /tmp/flux_dev/FLUX.1-dev \
  --steps 10 --warmup 3 --extra "--quantize_base fp8_scaled" --out "$OUT/flux_dev_fp8_step_gpu.json"
