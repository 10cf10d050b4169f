#!/usr/bin/env python
"""LoRA fine-tuning of Sana (SanaPipeline / SanaTransformer2DModel).

    dit-lora launch recipes/sana_lora.py --config recipes/configs/sana/demo.yaml
    python recipes/sana_lora.py --config recipes/configs/sana/1600m_1024px.yaml --train_data_dir ./my_images

Every option: `python recipes/sana_lora.py --help`.
"""

from dit_lora.recipe import main

if __name__ == "__main__":
    main("sana")
