"""kit/image_samples.py: a square-image family's validation images, one way: the in-memory pipeline
without text encoders (VAE moved in, the family's sampler) called with the family's cached arguments, the reloaded
pipeline with the prompt; both at ``--resolution`` and the validation steps."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.image_samples import SquareImageSamples
from config_stand_in import stand_in


class Pipeline:
    def __init__(self, **parts) -> None:
        self.parts, self.calls = parts, []
        self.transformer = SimpleNamespace(device=torch.device("cpu"))

    def set_progress_bar_config(self, disable: bool) -> None:
        self.quiet = disable

    def __call__(self, *prompt, **kwargs):
        self.calls.append((prompt, kwargs))
        return SimpleNamespace(images=["image"])


class Samples(SquareImageSamples, DiffusionSamples):
    built: list = []

    def pipeline_class(self):
        def build(**parts):
            self.built.append(Pipeline(**parts))
            return self.built[-1]

        return build

    def sampler(self, comps):
        return "sampler"

    def cached_kwargs(self, cond, device, data, validation):
        return {"prompt_embeds": cond["prompt_embeds"], "guidance_scale": 4.0}

    def prompt_kwargs(self, cfg, num_images):
        return {"num_images_per_prompt": num_images}


def test_both_ways_draw_squares_with_the_familys_own_arguments():
    cfg = stand_in(resolution=64, validation_inference_steps=2)
    vae = SimpleNamespace(device="cpu", to=lambda device: None)
    model = torch.nn.Linear(2, 2)
    embeds = torch.ones(1, 4, 8)
    assert Samples(None).generate(Components(model=None, encoders={"vae": vae}), model, {"prompt_embeds": embeds},
                                  cfg, seed=0) == ["image"]
    pipe = Samples.built[-1]
    assert pipe.quiet and pipe.parts == {"tokenizer": None, "text_encoder": None, "vae": vae, "transformer": model,
                                         "scheduler": "sampler"}
    (prompt, kwargs), = pipe.calls
    assert prompt == () and kwargs["prompt_embeds"] is embeds and kwargs["guidance_scale"] == 4.0
    assert (kwargs["height"], kwargs["width"], kwargs["num_inference_steps"]) == (64, 64, 2)
    reloaded = Pipeline()
    Samples(None).generate_with_pipeline(reloaded, "a cat", cfg, seed=0, num_images=3)
    (prompt, kwargs), = reloaded.calls
    assert prompt == ("a cat",) and kwargs["num_images_per_prompt"] == 3 and kwargs["height"] == 64


def test_decoding_in_vae_dtype_casts_then_gives_back_the_decode_it_found():
    """Latents reach the VAE's decode in its dtype while the context lasts; afterwards the class's decode (or a decode
    already set on the instance) is back."""
    import torch

    from dit_lora.kit.image_samples import decoding_in_vae_dtype

    class Vae:
        dtype = torch.float32

        def decode(self, latents):
            return latents.dtype

    vae = Vae()
    with decoding_in_vae_dtype(vae):
        assert vae.decode(torch.zeros(1, dtype=torch.bfloat16)) == torch.float32
    assert "decode" not in vars(vae) and vae.decode(torch.zeros(1, dtype=torch.bfloat16)) == torch.bfloat16
    own = vae.decode = lambda latents: "own"
    with decoding_in_vae_dtype(vae):
        assert vae.decode(torch.zeros(1)) == "own"
    assert vae.decode is own
