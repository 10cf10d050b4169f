"""families/videollm/outputs.py: validation answers as text files about the run's clip, the card, every adapter
type through PeftModel.from_pretrained (the base model named: tests/output/test_adapter.py). Reloading a trained
adapter: tests/e2e/test_videollm.py; the card's snippet: test_qwen2_5_vl.py."""

from __future__ import annotations

import pytest

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.contract.family import Components
from dit_lora.families.videollm import outputs
from dit_lora.families.videollm.state import VideoLLMState
from dit_lora.registry import get_family


def config(**kw) -> TrainConfig:
    return TrainConfig.for_family(family="llava_next_video", **kw)


def test_samples_are_text_files(tmp_path):
    path = get_family("llava_next_video").samples.save_sample("It is red.", tmp_path / "step_5", config())
    assert path == tmp_path / "step_5.txt" and path.read_text() == "It is red.\n"


class _Processing:
    def __init__(self) -> None:
        self.asked = []

    def answer(self, model, question, video, num_frames):
        self.asked.append((question, video, num_frames))
        return "red"


def test_validation_asks_about_the_runs_clip_else_the_option(tmp_path):
    samples = outputs.VideoLLMSamples()
    processing = _Processing()
    comps = Components(model=None, state=VideoLLMState(processing, validation_video=tmp_path / "first.mp4"))
    # the sample file names the clip relative to the data folder (clips of one name in two subfolders stay apart)
    (tmp_path / "ann.json").write_text("[]")
    chosen = tmp_path / "clips" / "chosen.mp4"
    cfg = config(validation_prompt="What colour?", validation_video=str(chosen), num_frames=4,
                 train_data_dir=str(tmp_path / "ann.json"))
    cond = samples.validation_inputs(comps, cfg.validation)
    assert samples.generate(comps, "model", cond, cfg, seed=0) == ["video: first.mp4\nQ: What colour?\nA: red"]
    pipe = outputs.VideoQAPipe("reloaded", processing)
    assert samples.generate_with_pipeline(pipe, "What colour?", cfg, 0, 1) == [
        "video: clips/chosen.mp4\nQ: What colour?\nA: red"]
    assert processing.asked == [("What colour?", tmp_path / "first.mp4", 4), ("What colour?", chosen, 4)]
    with pytest.raises(UserError, match="needs a clip: set --validation_video"):
        samples.generate_with_pipeline(pipe, "What colour?", config(), 0, 1)


def test_the_card_rows_and_no_license():
    card = get_family("llava_next_video").card
    rows = card.card_settings(config(num_frames=6, train_vision_tower=True))
    assert rows["num_frames"] == 6 and rows["vision_tower"] == "trained" and rows["use_liger_kernel"] is None
    assert rows["projector"].startswith(card.arch.projector)
    assert card.base_model_license(config().model) is None
    snippet = card.usage_snippet(config(pretrained_model_name_or_path="base"), "out")
    assert card.arch.model_class in snippet and "timing" not in snippet  # LLaVA's positions do not encode time


@pytest.mark.parametrize("kind", ["dora", "lokr", "loha"])
def test_every_adapter_type_loads_with_peft_model_from_pretrained(kind, tiny_path, tmp_path):
    """The video LLMs' PEFT-format folder of each --lora_type loads with PEFT's own ``PeftModel.from_pretrained``,
    every adapter weight landing, at the trained logits (alpha/r folded: the saved config says alpha = r)."""
    import torch
    from peft import PeftModel
    from peft.utils import get_peft_model_state_dict

    from dit_lora.modeling import trainables
    from dit_lora.output.adapter import write_adapter

    spec = get_family("llava_next_video")
    trained = spec.adapter.arch.load_model(tiny_path, torch.float32)
    lora = config(lora_type=kind, rank=4, lora_alpha=8).lora
    trainables.add_adapter(trained, lora, targets=["q_proj", "v_proj"], seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    state, backbone = trainables.split_trainable_state(trained, [])
    write_adapter(spec, tmp_path, state, trained.peft_config["default"].to_dict(), backbone, [])
    loaded = PeftModel.from_pretrained(spec.adapter.arch.load_model(tiny_path, torch.float32), str(tmp_path)).eval()
    got_state = {k.removeprefix("base_model.model."): v for k, v in get_peft_model_state_dict(loaded).items()}
    assert got_state.keys() == state.keys()
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    with torch.no_grad():
        want, got = trained.eval()(input_ids=ids).logits, loaded(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
