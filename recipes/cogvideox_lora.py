#!/usr/bin/env python
"""LoRA fine-tuning of CogVideoX text-to-video (CogVideoXPipeline, --family cogvideox, the default) and
image-to-video (CogVideoXImageToVideoPipeline, --family cogvideox_i2v); 1.0 (2B, 5B) and 1.5.

    dit-lora launch recipes/cogvideox_lora.py --config recipes/configs/cogvideox/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/cogvideox/demo.yaml   # the same, through the installed package
    dit-lora launch recipes/cogvideox_lora.py --config recipes/configs/cogvideox/i2v_demo.yaml
    python recipes/cogvideox_lora.py --pretrained_model_name_or_path THUDM/CogVideoX-5b --train_data_dir ./my_clips

Every option (the family's and the common ones): `python recipes/cogvideox_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("cogvideox")  # also trains cogvideox_i2v: every name of its registry entry
