#!/usr/bin/env python
"""LoRA fine-tuning of CogVideoX text-to-video (CogVideoXPipeline, --family cogvideox, the default) and
image-to-video (CogVideoXImageToVideoPipeline, --family cogvideox_i2v); 1.0 (2B, 5B) and 1.5.

    accelerate launch recipes/cogvideox_lora.py --config recipes/configs/cogvideox/demo.yaml
    accelerate launch recipes/cogvideox_lora.py --config recipes/configs/cogvideox/i2v_demo.yaml
    python recipes/cogvideox_lora.py --pretrained_model_name_or_path THUDM/CogVideoX-5b --train_data_dir ./my_clips

Every option: `python recipes/cogvideox_lora.py --help`.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Python puts this folder first on sys.path, where recipes/dit_lora.py would shadow the dit_lora package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
try:
    import dit_lora  # noqa: F401
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(HERE))

from dit_lora.recipe import main

if __name__ == "__main__":
    main("cogvideox", also=("cogvideox_i2v",))
