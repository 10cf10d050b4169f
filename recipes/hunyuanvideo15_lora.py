#!/usr/bin/env python
"""LoRA fine-tuning of HunyuanVideo 1.5: text-to-video (HunyuanVideo15Pipeline, --family hunyuanvideo15, the default)
and image-to-video (HunyuanVideo15ImageToVideoPipeline, --family hunyuanvideo15_i2v).

    dit-lora launch recipes/hunyuanvideo15_lora.py --config recipes/configs/hunyuanvideo15/demo.yaml
    dit-lora launch recipes/hunyuanvideo15_lora.py --config recipes/configs/hunyuanvideo15/i2v_demo.yaml
    python recipes/hunyuanvideo15_lora.py --pretrained_model_name_or_path hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v --train_data_dir ./my_clips

Every option (the family's and the common ones): `python recipes/hunyuanvideo15_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("hunyuanvideo15")  # also trains hunyuanvideo15_i2v: every name of its registry entry
