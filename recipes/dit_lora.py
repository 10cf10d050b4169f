#!/usr/bin/env python
"""LoRA fine-tuning of class-conditional DiT (DiTPipeline / DiTTransformer2DModel), OpenDiT-style.

    accelerate launch recipes/dit_lora.py --config recipes/configs/dit/demo.yaml
    python recipes/dit_lora.py --pretrained_model_name_or_path facebook/DiT-XL-2-256 --resolution 256 \
        --train_data_dir ./my_classes --num_classes 10      # ./my_classes/<class name>/<image>

Every option: `python recipes/dit_lora.py --help`.
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
    main("dit")
