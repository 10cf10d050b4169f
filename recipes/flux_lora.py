#!/usr/bin/env python
"""LoRA fine-tuning of FLUX.1 [dev] (FluxPipeline).

    dit-lora launch recipes/flux_lora.py --config recipes/configs/flux/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/flux/demo.yaml   # the same, through the installed package
    python recipes/flux_lora.py --pretrained_model_name_or_path black-forest-labs/FLUX.1-dev --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/flux_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("flux")
