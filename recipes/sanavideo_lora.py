#!/usr/bin/env python
"""LoRA fine-tuning of SANA-Video: text-to-video (SanaVideoPipeline, --family sanavideo, the default) and
image-to-video (SanaImageToVideoPipeline, --family sanavideo_i2v), from one checkpoint
(Efficient-Large-Model/SANA-Video_2B_480p_diffusers).

    dit-lora launch recipes/sanavideo_lora.py --config recipes/configs/sanavideo/demo.yaml
    dit-lora launch recipes/sanavideo_lora.py --config recipes/configs/sanavideo/i2v_demo.yaml
    python recipes/sanavideo_lora.py --pretrained_model_name_or_path Efficient-Large-Model/SANA-Video_2B_480p_diffusers --train_data_dir ./my_clips

Every option (the family's and the common ones): `python recipes/sanavideo_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("sanavideo")  # also trains sanavideo_i2v: every name of its registry entry
