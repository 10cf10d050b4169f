#!/usr/bin/env python
"""LoRA fine-tuning of Wan 2.1 and 2.2: text-to-video (WanPipeline, --family wan, the default: T2V 1.3B/14B,
TI2V-5B, T2V-A14B) and image-to-video (WanImageToVideoPipeline, --family wan_i2v: I2V 14B 480P/720P, I2V-A14B,
TI2V-5B's image mode).

    dit-lora launch recipes/wan_lora.py --config recipes/configs/wan/demo.yaml
    dit-lora launch recipes/wan_lora.py --config recipes/configs/wan/i2v_demo.yaml
    python recipes/wan_lora.py --pretrained_model_name_or_path Wan-AI/Wan2.1-T2V-1.3B-Diffusers --train_data_dir ./my_clips
    python recipes/wan_lora.py --pretrained_model_name_or_path Wan-AI/Wan2.2-T2V-A14B-Diffusers --wan_expert both ...

Every option (the family's and the common ones): `python recipes/wan_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("wan")  # also trains wan_i2v: every name of its registry entry
