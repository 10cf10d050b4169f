#!/usr/bin/env python
"""LoRA fine-tuning of Chroma (ChromaPipeline: Chroma1-HD, Chroma1-Base).

    dit-lora launch recipes/chroma_lora.py --config recipes/configs/chroma/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/chroma/demo.yaml   # the same, through the installed package
    python recipes/chroma_lora.py --pretrained_model_name_or_path lodestones/Chroma1-HD --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/chroma_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("chroma")
