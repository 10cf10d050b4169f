#!/usr/bin/env python
"""LoRA fine-tuning of Ideogram 4 (Ideogram4Pipeline).

    dit-lora launch recipes/ideogram4_lora.py --config recipes/configs/ideogram4/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/ideogram4/demo.yaml   # the same, through the installed package
    python recipes/ideogram4_lora.py --pretrained_model_name_or_path ideogram-ai/ideogram-v4 --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/ideogram4_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("ideogram4")
