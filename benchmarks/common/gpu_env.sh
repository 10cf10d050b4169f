# Sourced by the lent-GPU check scripts (gpu_checks.sh, gpu_family_checks.sh): $OUT made (default: the script's own
# /tmp folder, $1), the wheels the machine lacks installed from .whl/ (benchmarks/RESULTS.md), the environment every
# piece runs in, the machine and library versions printed, and `piece`, which time-boxes one step.
OUT=${OUT:-$1}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, diffusers, peft, transformers, accelerate; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, 'diffusers', diffusers.__version__, 'peft', peft.__version__, 'transformers', \
transformers.__version__, 'accelerate', accelerate.__version__)"
piece() {  # piece SECONDS NAME COMMAND...: run, time-boxed, and say how it ended
  local limit=$1 name=$2; shift 2
  local start=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout --kill-after=5 "$limit" "$@"
  echo "=== $name: exit $? after $((SECONDS - start))s"
}
