"""families/ltx2/adapter.py: the card's snippet writes the clip with its sound at the trained size and rate (the
conformance suite runs it on a trained demo), and its rows say how the sound trained."""

from __future__ import annotations

from ltx2_configs import ltx2_cfg

from dit_lora.families.ltx2.adapter import LTX2Card
from dit_lora.families.ltx2.spec import TASK


def test_the_snippet_writes_frames_and_sound():
    cfg = ltx2_cfg("Lightricks/LTX-2", validation_prompt="a dog barks")
    text = LTX2Card(TASK).snippet(cfg, "me/my-lora").text()
    assert "LTX2Pipeline.from_pretrained(model_id, vae=vae" in text and 'pipe.load_lora_weights("me/my-lora")' in text
    assert "num_frames=121, height=512, width=768, frame_rate=24," in text
    assert "video, audio = result.frames[0], result.audio[0]" in text and "encode_video(video, fps=24" in text
    compile(text, "snippet", "exec")


def test_the_rows_say_how_the_sound_trained():
    rows = LTX2Card(TASK).card_settings(ltx2_cfg("Lightricks/LTX-2", audio="off", max_sequence_length=256))
    assert rows["audio"] == "off" and rows["max_sequence_length"] == 256
    assert rows["resolution"].startswith("121x512x768")


def test_the_image_to_video_snippet_animates_the_conditioning_image():
    from dit_lora.families.ltx2.spec import TASKS

    cfg = ltx2_cfg("Lightricks/LTX-2", family="ltx2_i2v", validation_image="frame.png")
    text = LTX2Card(TASKS["ltx2_i2v"]).snippet(cfg, "me/my-lora").text()
    assert "LTX2ImageToVideoPipeline.from_pretrained" in text and 'image = load_image("card_input.png")' in text
    assert "    image=image,\n" in text
    compile(text, "snippet", "exec")
