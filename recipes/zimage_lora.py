#!/usr/bin/env python
"""LoRA fine-tuning of Z-Image and Z-Image-Turbo (ZImagePipeline / ZImageTransformer2DModel).

    dit-lora launch recipes/zimage_lora.py --config recipes/configs/zimage/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/zimage/demo.yaml   # the same, through the package
    python recipes/zimage_lora.py --pretrained_model_name_or_path Tongyi-MAI/Z-Image --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/zimage_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("zimage")
