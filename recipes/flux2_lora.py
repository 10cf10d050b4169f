#!/usr/bin/env python
"""LoRA fine-tuning of FLUX.2 (Flux2Pipeline for FLUX.2 [dev], Flux2KleinPipeline for the klein models).

    dit-lora launch recipes/flux2_lora.py --config recipes/configs/flux2/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/flux2/demo.yaml   # the same, through the installed package
    python recipes/flux2_lora.py --pretrained_model_name_or_path black-forest-labs/FLUX.2-klein-base-4B --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/flux2_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("flux2")
