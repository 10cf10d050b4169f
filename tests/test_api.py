"""api.py: ``dit_lora.load_adapter`` loads an output folder into a pipeline, fitted by its family when it has one."""

from __future__ import annotations

import pytest
import torch

from dit_lora.api import load_adapter
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.output.adapter import write_adapter
from dit_lora.modeling import trainables


def _fresh_transformer(tiny_sana):
    from diffusers import SanaTransformer2DModel

    return SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer", torch_dtype=torch.bfloat16)


def test_backbone_weights_round_trip_with_load_adapter(tiny_sana, tmp_path):
    from diffusers import SanaPipeline

    family = get_family("sana")
    model = _fresh_transformer(tiny_sana)
    trainables.add_lora(model, rank=4, alpha=4, dropout=0.0, targets=("to_q",), seed=0)
    names = trainables.unfreeze_backbone(model, ["caption_projection"])
    trainables.cast_trainable_to_fp32(model, under_autocast=True)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in names or "lora_B" in n:
                p.add_(0.1)
    lora, backbone = trainables.split_trainable_state(model, names)
    write_adapter(family, tmp_path, lora, model.peft_config["default"].to_dict(), backbone, ["caption_projection"])
    pipe = SanaPipeline.from_pretrained(tiny_sana, torch_dtype=torch.bfloat16)
    load_adapter(pipe, tmp_path)
    loaded = dict(pipe.transformer.named_parameters())
    for n in names:
        assert torch.equal(loaded[n], dict(model.named_parameters())[n].to(torch.bfloat16))


def test_a_model_of_no_family_gets_the_peft_adapter(tmp_path):
    """A plain module (a transformers model in practice): the PEFT-format files, at the trained rank and alpha."""
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(4, 4))
    trained = inject_adapter_in_model(LoraConfig(r=2, lora_alpha=4, target_modules=["0"]), torch.nn.Sequential(
        torch.nn.Linear(4, 4)))
    with torch.no_grad():
        trained[0].base_layer.load_state_dict(base[0].state_dict())
        trained[0].lora_B["default"].weight.fill_(0.5)
        assert not torch.allclose(trained(torch.ones(1, 4)), base(torch.ones(1, 4)))
    lora, backbone = trainables.split_trainable_state(trained, [])
    write_adapter(get_family("llava_next_video"), tmp_path, lora, trained.peft_config["default"].to_dict(), backbone,
                  [])
    x = torch.randn(3, 4)
    assert load_adapter(base, tmp_path) is base
    with torch.no_grad():
        torch.testing.assert_close(base(x), trained(x))


def test_a_missing_output_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_adapter(torch.nn.Linear(2, 2), tmp_path / "missing")


def test_answer_video_refuses_a_model_no_video_llm_family_trains(tmp_path):
    """``dit_lora.answer_video`` (the video-LLM cards' call) says in one paragraph what it takes instead of failing
    deep inside; ``load_edit_processor`` is public beside it."""
    import torch

    import dit_lora
    from dit_lora.core.errors import UserError

    with pytest.raises(UserError, match="not a video LLM dit-lora trains"):
        dit_lora.answer_video(torch.nn.Linear(2, 2), tmp_path, tmp_path / "clip.mp4", "what?", num_frames=8)
    assert {"answer_video", "load_edit_processor", "load_adapter"} <= set(dit_lora.__all__)
