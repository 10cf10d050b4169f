"""families/ltx2/samples.py: the cached captions pass the in-memory pipeline's connectors unchanged, and a clip is
written with its sound."""

from __future__ import annotations

import av
import torch
from PIL import Image

from dit_lora.families.ltx2.samples import CachedConnectors, LTX2Samples


def test_the_stand_in_hands_back_the_cached_embeddings():
    video, audio, mask = torch.randn(2, 5, 4), torch.randn(2, 5, 3), torch.ones(2, 5)
    out = CachedConnectors(4)(torch.cat([video, audio], -1), mask, padding_side="left")
    assert torch.equal(out[0], video) and torch.equal(out[1], audio) and out[2] is mask


def test_a_clip_is_written_with_its_sound(tmp_path):
    from ltx2_configs import ltx2_cfg

    from dit_lora.families.ltx2.spec import TASK

    samples = LTX2Samples(TASK, None)
    frames = [Image.new("RGB", (64, 64), (i * 20, 0, 0)) for i in range(9)]
    wave = 0.3 * torch.sin(torch.arange(6000) / 16000 * 2 * torch.pi * 440).expand(2, -1)
    path = samples.save_sample((frames, (wave, 16000)), tmp_path / "final_0", ltx2_cfg("Lightricks/LTX-2"))
    with av.open(str(path)) as container:
        kinds = sorted(s.type for s in container.streams)
        rate = container.streams.video[0].average_rate
    assert path.suffix == ".mp4" and kinds == ["audio", "video"] and rate == 24


def test_in_memory_clips_are_the_stock_pipelines(tiny, tiny_folder):
    """From the cached caption embeddings (through the stand-in connectors) the in-memory pipeline makes the clip and
    sound the stock pipeline makes from the prompt, same seed."""
    from diffusers import LTX2Pipeline
    from ltx2_configs import ltx2_cfg

    from dit_lora.contract.capabilities import TextSettings
    from dit_lora.families.ltx2.encoders import LTX2Encoders
    from dit_lora.families.ltx2.model import make_components
    from dit_lora.families.ltx2.spec import TASK

    cfg = ltx2_cfg(tiny_folder, height=64, width=64, max_num_frames=9, validation_inference_steps=2,
                   validation_guidance_scale=4.0, num_validation_images=1)
    extra = {"audio_vae": tiny["audio_vae"], "connectors": tiny["connectors"]}
    comps = make_components(cfg, tiny["transformer"], tiny["vae"], tiny["text_encoder"], extra,
                            {**tiny["scheduler"].config, "_class_name": "FlowMatchEulerDiscreteScheduler"}, "cpu")
    comps.encoders["tokenizer"] = tiny["tokenizer"]
    comps.state.text = TextSettings(max_sequence_length=64)
    cond = LTX2Encoders().encode_prompts(comps, ["a red square"], with_negative=True)
    samples = LTX2Samples(TASK, LTX2Encoders())
    (frames, (audio, rate)), = samples.generate(comps, tiny["transformer"], cond, cfg, seed=0)
    pipe = LTX2Pipeline(**{k: tiny[k] for k in ("scheduler", "vae", "audio_vae", "text_encoder", "tokenizer",
                                                 "connectors", "transformer", "vocoder")})
    (stock_frames, (stock_audio, stock_rate)), = samples.generate_with_pipeline(pipe, "a red square", cfg, 0, 1)
    assert rate == stock_rate == 16000 and len(frames) == len(stock_frames) == 9
    torch.testing.assert_close(audio, stock_audio, atol=1e-4, rtol=1e-4)
    import numpy as np

    assert np.abs(np.asarray(frames[4], dtype=float) - np.asarray(stock_frames[4], dtype=float)).max() <= 1
