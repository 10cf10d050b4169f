#!/usr/bin/env python
"""LoRA fine-tuning of Krea 2 (Krea2Pipeline).

    dit-lora launch recipes/krea2_lora.py --config recipes/configs/krea2/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/krea2/demo.yaml   # the same, through the installed package
    python recipes/krea2_lora.py --pretrained_model_name_or_path krea/Krea-2-Raw --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/krea2_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("krea2")
