#!/usr/bin/env python
"""LoRA fine-tuning of Lumina 2 (Lumina2Pipeline: Alpha-VLLM's Lumina-Image 2.0).

    dit-lora launch recipes/lumina2_lora.py --config recipes/configs/lumina2/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/lumina2/demo.yaml   # the same, through the installed package
    python recipes/lumina2_lora.py --pretrained_model_name_or_path Alpha-VLLM/Lumina-Image-2.0 --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/lumina2_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("lumina2")
