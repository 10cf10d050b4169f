"""families/qwenimage/samples.py: validation images from the in-memory transformer and from the pipeline."""

from __future__ import annotations

import torch
from diffusers import QwenImagePipeline

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.contract.spec import configure
from dit_lora.families.qwenimage.state import QwenImageRun
from dit_lora.registry import get_family


def test_generate_and_generate_with_pipeline_give_the_same_image(tiny_qwenimage):
    spec = get_family("qwenimage")
    cfg = TrainConfig.for_family("qwenimage", pretrained_model_name_or_path=str(tiny_qwenimage), resolution=32,
                                 validation_prompt="a red circle", validation_inference_steps=2, mixed_precision="no")
    pipe = QwenImagePipeline.from_pretrained(tiny_qwenimage, torch_dtype=torch.float32)
    comps = Components(model=pipe.transformer, encoders={"vae": pipe.vae, "text_encoder": pipe.text_encoder,
                                                         "tokenizer": pipe.tokenizer},
                       state=QwenImageRun(scheduler_config=dict(pipe.scheduler.config)))
    configure(spec, comps, cfg)
    cond = spec.samples.validation_inputs(comps, cfg.validation)
    ours = spec.samples.generate(comps, pipe.transformer, cond, cfg, seed=3)[0]
    theirs = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=1)[0]
    assert ours.size == (32, 32)
    a, b = (torch.tensor(list(im.getdata()), dtype=torch.float32) for im in (ours, theirs))
    assert (a - b).abs().max() <= 1  # the same sampler on the same embeddings (PNG rounding)
