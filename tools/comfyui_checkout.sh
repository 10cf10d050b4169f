#!/usr/bin/env bash
# A ComfyUI checkout and its few extra dependencies for the `comfyui` tests (tests/support/comfyui_loader.py), which
# load dit-lora adapters with ComfyUI's own LoRA loader. ComfyUI is not on PyPI and never enters this repository.
#
#   tools/comfyui_checkout.sh [FOLDER] [COMMIT]     # default ~/.cache/dit-lora/comfyui, the commit below
#   export DIT_LORA_COMFYUI=FOLDER DIT_LORA_COMFYUI_DEPS=FOLDER-deps
#   python -m pytest -q -p no:xdist -m comfyui      # only the ComfyUI checks (~5-15 s each: a subprocess apiece)
#
# Run it with the python of dit-lora's environment active: the extra packages are installed next to the checkout
# (pip --target, no dependencies: torch and numpy come from that environment), not into the environment itself.
# CI does not run these tests (no network there); they skip, with the reason, when DIT_LORA_COMFYUI is unset.
set -euo pipefail

folder=${1:-$HOME/.cache/dit-lora/comfyui}
# comfyanonymous/ComfyUI, 2026-01-07 ("Support gemma 12B with quant weights"): has Wan 2.1/2.2, Qwen-Image (Edit
# 2509/2511), FLUX.2, Z-Image (Lumina2), LTX-2 (LTXAV) and HunyuanVideo 1.5. The tests pass on this tree and on
# fe2511468d6b3f7a1581a711ae480f3313f2b39d (2026-02-03, ComfyUI v0.12.1).
commit=${2:-3cd7b32f1b7e7e90395cefe7d9f9b1f89276d8ce}

if [ ! -d "$folder/.git" ]; then
    mkdir -p "$folder"
    git -C "$folder" init -q
    git -C "$folder" remote add origin https://github.com/comfyanonymous/ComfyUI.git
fi
git -C "$folder" fetch -q --depth 1 origin "$commit"
git -C "$folder" checkout -q --detach FETCH_HEAD

# What ComfyUI's model code imports beyond dit-lora's own dependencies (torch, numpy, safetensors, pyyaml, Pillow).
# torchvision is not needed: the test harness puts a stub in its worker process.
# comfy-aimdo: imported by comfy/model_management.py from February 2026 (upstream fe251146, also tested) on.
python -m pip install -q --no-deps --target "$folder-deps" einops torchsde trampoline scipy comfy-aimdo

echo "export DIT_LORA_COMFYUI=$folder DIT_LORA_COMFYUI_DEPS=$folder-deps"
