#!/usr/bin/env python
"""LoRA fine-tuning of LTX-2 with its sound: text-to-video (LTX2Pipeline, --family ltx2, the default), image-to-video
(LTX2ImageToVideoPipeline, --family ltx2_i2v) and in-context LoRAs (LTX2InContextPipeline, --family ltx2_ic: a
reference clip beside each clip), from one checkpoint (Lightricks/LTX-2).

    dit-lora launch recipes/ltx2_lora.py --config recipes/configs/ltx2/demo.yaml
    dit-lora launch recipes/ltx2_lora.py --config recipes/configs/ltx2/i2v_demo.yaml
    dit-lora launch recipes/ltx2_lora.py --config recipes/configs/ltx2/ic_demo.yaml
    python recipes/ltx2_lora.py --pretrained_model_name_or_path Lightricks/LTX-2 --train_data_dir ./my_clips

Every option (the family's and the common ones): `python recipes/ltx2_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("ltx2")  # also trains ltx2_i2v and ltx2_ic: every name of its registry entry
