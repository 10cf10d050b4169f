"""Chroma's loss, written out by hand from diffusers' FLUX training script with the pipeline's dynamic shift: the
packed noisy latents, sigma as the timestep, no guidance, the zero caption ids and the image ids, the caption's
boolean mask followed by ones for the image tokens, the weighted MSE against ``eps - x0``. And the checkpointed
transformer's step equal to the unchecked one (diffusers' own checkpointing drops the single blocks' mask)."""

from __future__ import annotations


import pytest
import torch
from diffusers import FluxPipeline

from helpers import Recorder
from packed_flow import hand_computed_loss
from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.chroma.state import ChromaRun
from dit_lora.registry import get_family

SCHEDULER = {"base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
             "shift": 3.0, "use_dynamic_shifting": True}



def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.arange(10).expand(3, 10) <= torch.tensor([[3], [9], [0]])
    return {"latents": torch.randn(3, 4, 6, 8, generator=gen), "prompt_embeds": torch.randn(3, 10, 12, generator=gen),
            "prompt_attention_mask": mask}


@pytest.mark.parametrize("scheme, shift", [("none", None), ("logit_normal", None), ("none", 3.0)])
def test_loss_is_the_hand_computed_flow_matching_loss(scheme, shift):
    batch, denoiser = _batch(), Recorder()
    comps = Components(model=None, scheduler=None, state=ChromaRun(scheduler_config=SCHEDULER))
    cfg = TrainConfig.for_family("chroma", pretrained_model_name_or_path="m", weighting_scheme=scheme,
                                 chroma_shift=shift)
    loss = get_family("chroma").loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(5), cfg)
    expected, sigmas, packed = hand_computed_loss(batch["latents"], scheme, shift, 5)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    (call,) = denoiser.calls
    torch.testing.assert_close(call["hidden_states"], packed)
    torch.testing.assert_close(call["timestep"], sigmas)  # the transformer multiplies by 1000 itself
    assert "guidance" not in call and "pooled_projections" not in call
    assert torch.equal(call["img_ids"], FluxPipeline._prepare_latent_image_ids(3, 3, 4, "cpu", torch.float32))
    assert torch.equal(call["txt_ids"], torch.zeros(10, 3))
    mask = call["attention_mask"]
    assert mask.dtype == torch.bool and mask.shape == (3, 10 + 12)
    assert torch.equal(mask[:, :10], batch["prompt_attention_mask"]) and bool(mask[:, 10:].all())


def _step(checkpointing: str, batch, model):
    """The loss and the LoRA gradients of one step of ``model`` (a fresh copy) under ``checkpointing``: "off",
    "family" (Chroma's trainables) or "diffusers" (diffusers' own switch)."""
    import copy

    model = copy.deepcopy(model)
    if checkpointing == "family":
        get_family("chroma").trainables.enable_gradient_checkpointing(model)
    elif checkpointing == "diffusers":
        model.enable_gradient_checkpointing()
    model.train()
    comps = Components(model=model, scheduler=None, state=ChromaRun(scheduler_config=SCHEDULER))
    cfg = TrainConfig.for_family("chroma", pretrained_model_name_or_path="m")
    loss = get_family("chroma").loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(1), cfg)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]


def test_checkpointing_keeps_the_single_blocks_mask():
    """With Chroma's checkpointing the step is the unchecked step, bit for bit; diffusers' own switch would drop the
    mask in the single blocks and train another model (the test would catch a diffusers release that fixes it)."""
    from diffusers import ChromaTransformer2DModel
    from peft import LoraConfig

    from dit_lora.families.chroma.demo import DEMO

    torch.manual_seed(0)
    config = {k: v for k, v in DEMO.read().variant("hd")["transformer"].items() if k != "why"}
    model = ChromaTransformer2DModel(**config)
    model.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights="gaussian",
                                 target_modules=["to_q", "to_k", "to_v", "proj_mlp"]))
    gen = torch.Generator().manual_seed(3)
    mask = torch.arange(8).expand(2, 8) <= torch.tensor([[2], [5]])
    batch = {"latents": torch.randn(2, 4, 4, 4, generator=gen), "prompt_embeds": torch.randn(2, 8, 32, generator=gen),
             "prompt_attention_mask": mask}
    plain, family, upstream = (_step(mode, batch, model) for mode in ("off", "family", "diffusers"))
    assert torch.equal(plain[0], family[0]) and all(torch.equal(a, b) for a, b in zip(plain[1], family[1]))
    assert not torch.equal(plain[0], upstream[0])


def test_cutting_the_caption_padding_changes_the_loss_only_by_rounding():
    """``--trim_text_padding``: the tokens past every caption's mask cut from the batch give the same loss and
    gradients up to float rounding (they are masked as keys for every token; every text token's position is 0)."""
    from diffusers import ChromaTransformer2DModel
    from peft import LoraConfig

    from dit_lora.families.chroma.demo import DEMO

    torch.manual_seed(0)
    config = {k: v for k, v in DEMO.read().variant("hd")["transformer"].items() if k != "why"}
    model = ChromaTransformer2DModel(**config)
    model.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights="gaussian", target_modules=["to_q", "to_v"]))
    gen = torch.Generator().manual_seed(4)
    mask = torch.arange(16).expand(2, 16) <= torch.tensor([[2], [5]])
    batch = {"latents": torch.randn(2, 4, 4, 4, generator=gen), "prompt_embeds": torch.randn(2, 16, 32, generator=gen),
             "prompt_attention_mask": mask}
    cfg = TrainConfig.for_family("chroma", pretrained_model_name_or_path="m")
    results = []
    for tokens in (None, 8):
        model.zero_grad()
        comps = Components(model=model, scheduler=None, state=ChromaRun(scheduler_config=SCHEDULER, text_tokens=tokens))
        loss = get_family("chroma").loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(1), cfg)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]))
    (full, full_grads), (cut, cut_grads) = results
    torch.testing.assert_close(cut, full, rtol=1e-5, atol=1e-6)
    for a, b in zip(cut_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert not torch.equal(batch["prompt_embeds"][:, 8:], torch.zeros(2, 8, 32))  # the cut tokens were not zeros
