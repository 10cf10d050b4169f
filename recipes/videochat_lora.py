#!/usr/bin/env python
"""LoRA fine-tuning of VideoChat-style video LLMs: LLaVA-NeXT-Video (--family llava_next_video, the
default; a Mistral language model in the VideoChat2-Mistral layout) and Qwen2.5-VL (--family qwen2_5_vl),
on VideoChat2 instruction JSON or chat JSONL question-answer data.

    accelerate launch recipes/videochat_lora.py --config recipes/configs/videochat/demo.yaml
    python recipes/videochat_lora.py --pretrained_model_name_or_path llava-hf/LLaVA-NeXT-Video-7B-hf \\
        --train_data_dir ./videochat2_instructions.json --video_folder ./videos

Every option: `python recipes/videochat_lora.py --help`.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Python puts this folder first on sys.path, where recipes/dit_lora.py would shadow the dit_lora package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
try:
    import dit_lora  # noqa: F401
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(HERE))

from dit_lora.recipe import main

if __name__ == "__main__":
    main("llava_next_video", also=("qwen2_5_vl",))
