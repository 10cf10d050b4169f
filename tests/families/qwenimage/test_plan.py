"""families/qwenimage/plan.py: the memory plan of the real layout, from the catalogue's configs on the meta device."""

from __future__ import annotations

from dit_lora.commands.cli import main


def test_plan_of_the_published_qwen_image(capsys):
    try:
        code = main(["plan", "Qwen/Qwen-Image", "--gpu_memory", "80GB", "--resolution", "256"])
    except SystemExit as stop:
        code = stop.code
    assert code in (0, None)
    text = capsys.readouterr().out
    assert "catalogued as Qwen/Qwen-Image" in text and "60 blocks" in text and "weights: model" in text
