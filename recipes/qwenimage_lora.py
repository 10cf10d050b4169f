#!/usr/bin/env python
"""LoRA fine-tuning of Qwen-Image (QwenImagePipeline / QwenImageTransformer2DModel).

    dit-lora launch recipes/qwenimage_lora.py --config recipes/configs/qwenimage/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/qwenimage/demo.yaml   # the same, through the package
    python recipes/qwenimage_lora.py --pretrained_model_name_or_path Qwen/Qwen-Image --train_data_dir ./my_images

Every option (the family's and the common ones): `python recipes/qwenimage_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("qwenimage")
