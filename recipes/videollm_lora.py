#!/usr/bin/env python
"""LoRA fine-tuning of VideoChat-style video LLMs: LLaVA-NeXT-Video (--family llava_next_video, the
default; a Mistral language model in the VideoChat2-Mistral layout) and Qwen2.5-VL (--family qwen2_5_vl),
on VideoChat2 instruction JSON or chat JSONL question-answer data.

    dit-lora launch recipes/videollm_lora.py --config recipes/configs/videollm/demo.yaml
    dit-lora launch -m dit_lora train --config recipes/configs/videollm/demo.yaml   # the same, through the installed package
    python recipes/videollm_lora.py --pretrained_model_name_or_path llava-hf/LLaVA-NeXT-Video-7B-hf \\
        --train_data_dir ./videochat2_instructions.json --video_folder ./videos

Every option (the family's and the common ones): `python recipes/videollm_lora.py --help`.
"""

from dit_lora.commands.recipe import main

if __name__ == "__main__":
    main("llava_next_video")  # also trains qwen2_5_vl: every name of its registry entry
