#!/usr/bin/env python
"""LoRA fine-tuning of Sana (SanaPipeline / SanaTransformer2DModel).

    dit-lora launch recipes/sana_lora.py --config recipes/configs/sana/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/sana/demo.yaml   # the same, through the installed package
    python recipes/sana_lora.py --config recipes/configs/sana/1600m_1024px.yaml --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/sana_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("sana")
