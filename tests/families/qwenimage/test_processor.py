"""families/qwenimage/processor.py: the Edit models' processor without torchvision, saved and loaded back."""

from __future__ import annotations

from PIL import Image
from transformers import Qwen2VLImageProcessor

from dit_lora.families.qwenimage.demo import build_tiny_qwen_tokenizer
from dit_lora.families.qwenimage.processor import image_only_processor, load_processor, save_processor


def test_image_only_processor_expands_the_image_tokens_and_round_trips(tmp_path):
    tokenizer = build_tiny_qwen_tokenizer()
    processor = image_only_processor(Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112), tokenizer)
    text = ["Picture 1: <|vision_start|><|image_pad|><|vision_end|>make it red"]
    out = processor(text=text, images=[Image.new("RGB", (56, 84))], padding=True, return_tensors="pt")
    tokens = int(out["image_grid_thw"].prod()) // 4
    assert int((out["input_ids"] == processor.image_token_id).sum()) == tokens > 1
    loaded = load_processor(str(save_processor(processor, tmp_path / "processor").parent))
    again = loaded(text=text, images=[Image.new("RGB", (56, 84))], padding=True, return_tensors="pt")
    assert again["input_ids"].tolist() == out["input_ids"].tolist()


def test_a_hub_id_loads_offline_from_the_hub_cache(tmp_path):
    """``load_edit_processor("Qwen/Qwen-Image-Edit-2509")`` as the guide writes it, offline with the repo cached: the
    processor folder is taken from the cache (transformers given the id looks up a ``processor/config.json`` the
    Edit repos lack, which only the online Hub's 404 settles)."""
    from snippets import hub_cache

    processor = image_only_processor(Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112),
                                     build_tiny_qwen_tokenizer())
    model = save_processor(processor, tmp_path / "model" / "processor").parent
    text = ["Picture 1: <|vision_start|><|image_pad|><|vision_end|>make it red"]
    with hub_cache(tmp_path, {"Qwen/Qwen-Image-Edit-2509": model}):
        loaded = load_processor("Qwen/Qwen-Image-Edit-2509")
    out, again = (p(text=text, images=[Image.new("RGB", (56, 84))], padding=True, return_tensors="pt")
                  for p in (processor, loaded))
    assert again["input_ids"].tolist() == out["input_ids"].tolist()
