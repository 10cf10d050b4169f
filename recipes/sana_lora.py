#!/usr/bin/env python
"""LoRA fine-tuning of Sana (SanaPipeline / SanaTransformer2DModel).

    accelerate launch recipes/sana_lora.py --config recipes/configs/sana/demo.yaml
    python recipes/sana_lora.py --config recipes/configs/sana/1600m_1024px.yaml --train_data_dir ./my_images

Every option: `python recipes/sana_lora.py --help`.
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
    main("sana")
