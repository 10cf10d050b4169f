"""families/qwenimage/edit.py: the Edit models' sizes, prompts, control tokens in the loss and validation, against
the Edit pipelines' own code."""

from __future__ import annotations

from dataclasses import replace

import math
from types import SimpleNamespace

import pytest
import torch
from diffusers import QwenImageEditPlusPipeline
from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus import calculate_dimensions
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.config.schema import DataOptions
from dit_lora.contract.family import Components
from dit_lora.contract.spec import configure
from dit_lora.core.errors import UserError
from dit_lora.catalogue.files import catalogue_of
from dit_lora.families.qwenimage.edit import EditLoss, area_size
from dit_lora.families.qwenimage.processor import load_processor
from dit_lora.families.qwenimage.state import QwenImageRun
from dit_lora.registry import get_family

ENTRIES = catalogue_of("dit_lora.families.qwenimage").entries

CONFIG = ENTRIES[0].configs["scheduler/scheduler_config.json"]


@pytest.fixture(scope="module")
def tiny_edit_plus(tmp_path_factory):
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.kit.demo_data import add_control_images
    from dit_lora.families.qwenimage.demo import build_tiny_qwenimage_pipeline

    root = tmp_path_factory.mktemp("edit")
    data = add_control_images(make_shapes_dataset(root / "data", n=2, size=32, seed=0), per_sample=2)
    return build_tiny_qwenimage_pipeline(root / "tiny-edit-plus", "edit_plus"), data


@pytest.mark.parametrize("size", [(1024, 768), (500, 1000), (1328, 1328)])
def test_area_size_is_the_pipelines_calculate_dimensions(size):
    assert area_size(384 * 384, *size) == calculate_dimensions(384 * 384, size[0] / size[1])


def test_loss_appends_the_control_tokens_and_scores_the_target_only():
    gen = torch.Generator().manual_seed(0)
    latents, controls = torch.randn(2, 4, 4, 6, generator=gen), torch.randn(2, 2, 4, 4, 6, generator=gen)
    batch = {"latents": latents, "control_latents": controls, "prompt_embeds": torch.randn(2, 5, 8, generator=gen),
             "prompt_embeds_mask": torch.ones(2, 5, dtype=torch.long)}
    calls = []

    def model(**kwargs):
        calls.append(kwargs)
        return (kwargs["hidden_states"] * 0.5,)

    comps = Components(model=None, state=QwenImageRun(scheduler_config=dict(CONFIG)))
    cfg = SimpleNamespace(family_options=SimpleNamespace(weighting_scheme="none", logit_mean=0.0, logit_std=1.0,
                                                         mode_scale=1.29, qwen_shift_mode="dynamic",
                                                         qwen_fixed_shift=2.2), data=DataOptions())
    loss = EditLoss(None).compute_loss(comps, model, batch, torch.Generator().manual_seed(1), cfg)
    hidden = calls[0]["hidden_states"]
    assert hidden.shape == (2, 6 * 3, 16) and calls[0]["img_shapes"] == [[(1, 2, 3)] * 3] * 2
    assert torch.equal(hidden[:, 6:12], QwenImageEditPlusPipeline._pack_latents(controls[:, 0], 2, 4, 4, 6))
    ref = torch.Generator().manual_seed(1)
    noise = torch.randn(latents.shape, generator=ref)
    u = torch.rand(2, generator=ref)
    factor = math.exp(0.5 + (6 - 256) * 0.4 / 7936)
    sigma = (factor * u / (1 + (factor - 1) * u)).view(-1, 1, 1, 1)
    noisy = (1 - sigma) * latents + sigma * noise
    pack = lambda x: QwenImageEditPlusPipeline._pack_latents(x, 2, 4, 4, 6)  # noqa: E731
    torch.testing.assert_close(loss, ((pack(noisy) * 0.5 - pack(noise - latents)) ** 2).mean())


def test_encode_samples_caption_with_its_controls_and_their_latents(tiny_edit_plus):
    model, data = tiny_edit_plus
    spec = get_family("qwenimage_edit_plus")
    cfg = TrainConfig.for_family("qwenimage_edit_plus", pretrained_model_name_or_path=str(model),
                                 train_data_dir=str(data), resolution=32, mixed_precision="no")
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    media = spec.data.data_handler(cfg, spec)
    samples = media.screen(media.list_samples(), log=lambda m: None, quarantine=[])
    out = spec.encoders.encode_samples(comps, samples)
    assert out["control_latents"].shape == (2, 2, 4, 4, 4)  # (B, N controls, C, h, w): the bucket's size
    pipe = QwenImageEditPlusPipeline(scheduler=None, vae=None, transformer=None, text_encoder=comps.encoders[
        "text_encoder"], tokenizer=comps.encoders["tokenizer"], processor=comps.encoders["processor"])
    images = [Image.open(p).convert("RGB").resize(area_size(384 * 384, 32, 32), Image.Resampling.LANCZOS)
              for p in samples[0].conditions]
    ref, _ = pipe.encode_prompt([samples[0].caption], image=images, device="cpu")
    torch.testing.assert_close(out["prompt_embeds"][0, : ref.shape[1]], ref[0].to(out["prompt_embeds"].dtype))
    assert int(out["prompt_embeds_mask"][0].sum()) == ref.shape[1] and out["prompt_embeds"].shape[1] > 512
    assert spec.encoders.cache_identity(cfg)["edit"] == "edit_plus"


def test_validation_from_memory_is_the_reloaded_pipelines(tiny_edit_plus, monkeypatch):
    import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus as plus

    monkeypatch.setattr(plus, "VAE_IMAGE_SIZE", 64 * 64)  # the pipeline's 1024 x 1024 control area: slow on a CPU
    model, data = tiny_edit_plus
    spec = get_family("qwenimage_edit_plus")
    cfg = TrainConfig.for_family("qwenimage_edit_plus", pretrained_model_name_or_path=str(model),
                                 train_data_dir=str(data), resolution=32, mixed_precision="no",
                                 validation_prompt=["make it red", "make it blue"], validation_inference_steps=2)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    media = spec.data.data_handler(cfg, spec)
    samples = media.screen(media.list_samples(), log=lambda m: None, quarantine=[])
    spec.setup.inspect_samples(comps, cfg, samples)
    assert len(comps.state.validation_controls) == 2 and spec.samples.validation_inputs(comps, cfg.validation) == {}
    assert list(comps.state.validation_embeds) == ["make it red", "make it blue"]  # each prompt's, with the controls
    blue = replace(cfg, validation=cfg.validation.one_prompt("make it blue"))  # what the loop hands the second prompt
    ours = spec.samples.generate(comps, comps.model, {}, blue, seed=1)[0]
    pipe = QwenImageEditPlusPipeline.from_pretrained(model, processor=load_processor(str(model)),
                                                     torch_dtype=torch.float32)
    theirs = spec.samples.generate_with_pipeline(pipe, "make it blue", blue, 1, 1, comps=comps)[0]
    a, b = (torch.tensor(list(im.getdata()), dtype=torch.float32) for im in (ours, theirs))
    assert ours.size == (32, 32) and (a - b).abs().max() <= 1


def test_options_an_edit_run_cannot_take(monkeypatch):
    """Caption dropout too: Qwen2.5-VL encodes the caption with the control images (the kit refuses the others)."""
    from dit_lora.families.qwenimage import model as qwen_model

    monkeypatch.setattr(qwen_model.QwenImageModel, "validate_config", lambda self, cfg: None)
    model = qwen_model.QwenImageEditModel(get_family("qwenimage_edit").info, qwen_model.PARTS)
    for flag, value in (("caption_dropout_probability", 0.1), ("random_flip", True), ("cache_latents", False)):
        with pytest.raises(UserError, match=f"--{flag}.* not supported for Qwen-Image-Edit"):
            model.validate_config(TrainConfig.for_family("qwenimage_edit", **{flag: value}))
