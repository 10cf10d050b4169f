"""output/video.py: MP4 samples are written atomically and never through a link planted at their path."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dit_lora.output.video import write_video


def _frames(n: int = 4) -> list[np.ndarray]:
    return [np.full((16, 24, 3), 40 * i, dtype=np.uint8) for i in range(n)]


def test_a_planted_link_is_replaced_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data")
    out = tmp_path / "samples" / "final_0.mp4"
    out.parent.mkdir()
    out.symlink_to(victim)
    write_video(_frames(), out, fps=4)
    assert victim.read_text() == "precious data"
    assert not out.is_symlink() and out.stat().st_size > 0
    assert [p.name for p in out.parent.iterdir()] == ["final_0.mp4"]  # no temporary file left


def test_the_file_decodes_to_the_frames_written(tmp_path):
    import av

    out = write_video(_frames(5), tmp_path / "clip.mp4", fps=4)
    with av.open(str(out)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(decoded) == 5 and decoded[0].shape == (16, 24, 3)
    assert abs(int(decoded[4].mean()) - 160) <= 4


def test_the_cards_video_lines_write_an_mp4_with_pyav_alone(tmp_path, monkeypatch):
    """The lines the cards and guides print instead of diffusers' export_to_video (which needs imageio or OpenCV)
    write the pipeline's PIL frames as an MP4 of the frame count, size and rate asked for (also a fractional rate)."""
    import av
    from PIL import Image

    from dit_lora.output.video import snippet_write_video

    monkeypatch.chdir(tmp_path)
    video = [Image.new("RGB", (48, 32), (i * 40, 0, 0)) for i in range(5)]
    for fps, rate in ((16, 16), (30000 / 1001, Fraction(30000, 1001))):
        lines = snippet_write_video(fps)
        assert "export_to_video(" not in lines and "cv2" not in lines and "imageio" not in lines.split("#")[0]
        exec(compile(lines, "card", "exec"), {"video": video})
        with av.open("sample.mp4") as container:
            stream = container.streams.video[0]
            frames = list(container.decode(stream))
            assert (len(frames), stream.width, stream.height) == (5, 48, 32) and stream.average_rate == rate
