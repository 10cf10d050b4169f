"""families/zimage/samples.py: validation images from the in-memory transformer and cached embeddings are the
images ZImagePipeline draws from the prompt; the checkpoint's own sampler."""

from __future__ import annotations

import numpy as np
import torch
from diffusers import ZImagePipeline
from zimage_layout import zimage_cfg

from dit_lora.config.schema import ValidationOptions
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit.sampling import flow_sampler
from dit_lora.families.zimage.samples import embeddings
from dit_lora.families.zimage.state import ZImageRun
from dit_lora.registry import get_family


def test_in_memory_samples_are_the_pipelines(tiny):
    spec = get_family("zimage")
    scheduler_config = dict(tiny["scheduler"].config)
    comps = Components(model=tiny["transformer"], scheduler=None,
                       encoders={"vae": tiny["vae"], "text_encoder": tiny["text_encoder"], "tokenizer": tiny["tokenizer"]},
                       state=ZImageRun(scheduler_config=scheduler_config, text=TextSettings(max_sequence_length=64)))
    cfg = zimage_cfg(validation_prompt="a red circle", validation_inference_steps=3, validation_guidance_scale=2.0,
                     max_sequence_length=64, num_validation_images=2)
    cond = spec.samples.validation_inputs(comps, ValidationOptions(validation_prompt="a red circle"))
    images = spec.samples.generate(comps, tiny["transformer"], cond, cfg, seed=3)
    pipe = ZImagePipeline(**tiny)
    reference = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=2)
    assert len(images) == cfg.validation.num_validation_images == 2 and images[0].size == (64, 64)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(images, reference))


def test_embeddings_and_sampler():
    cond = {"prompt_embeds": torch.arange(12.0).view(2, 3, 2), "prompt_lengths": torch.tensor([1, 3])}
    out = embeddings(cond, "prompt_embeds", copies=2)
    assert [e.shape[0] for e in out] == [1, 1, 3, 3]
    comps = Components(model=None, scheduler="training", state=ZImageRun(scheduler_config={"shift": 3.0}))
    assert get_family("zimage").samples.sampler(comps).config.shift == 3.0  # the kit's flow_sampler
    assert flow_sampler(Components(model=None, scheduler="training")) == "training"
