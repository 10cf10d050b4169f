#!/usr/bin/env python
"""LoRA fine-tuning of class-conditional DiT (DiTPipeline / DiTTransformer2DModel), OpenDiT-style.

    dit-lora launch recipes/dit_class_lora.py --config recipes/configs/dit_class/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/dit_class/demo.yaml   # the same, through the installed package
    python recipes/dit_class_lora.py --pretrained_model_name_or_path facebook/DiT-XL-2-256 --resolution 256 \
        --train_data_dir ./my_classes --num_classes 10      # ./my_classes/<class name>/<image>

Every option (the family's and the common ones): `python recipes/dit_class_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("dit")
