#!/usr/bin/env python
"""LoRA fine-tuning of Sana (SanaPipeline / SanaTransformer2DModel).

    accelerate launch recipes/sana_lora.py --config recipes/configs/sana/demo.yaml
    python recipes/sana_lora.py --config recipes/configs/sana/1600m_1024px.yaml --train_data_dir ./my_images

Every option: `python recipes/sana_lora.py --help`.
"""

import os
import sys

try:
    import dit_lora  # noqa: F401
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dit_lora.recipe import main

if __name__ == "__main__":
    main("sana")
