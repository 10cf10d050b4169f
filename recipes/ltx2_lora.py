#!/usr/bin/env python
"""LoRA fine-tuning of LTX-2, text-to-video with its sound (LTX2Pipeline, --family ltx2; Lightricks/LTX-2).

    dit-lora launch recipes/ltx2_lora.py --config recipes/configs/ltx2/demo.yaml
    python recipes/ltx2_lora.py --pretrained_model_name_or_path Lightricks/LTX-2 --train_data_dir ./my_clips

Every option (the family's and the common ones): `python recipes/ltx2_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("ltx2")
