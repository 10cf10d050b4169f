"""output/video.py: MP4 samples are written atomically and never through a link planted at their path."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dit_lora.output.video import write_video


def _frames(n: int = 4) -> list[np.ndarray]:
    return [np.full((16, 24, 3), 40 * i % 256, dtype=np.uint8) for i in range(n)]


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


def _peak_hz(wave: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(len(wave))))
    return float(np.argmax(spectrum)) * rate / len(wave)


def test_a_sound_is_written_with_the_frames_and_decodes_back(tmp_path):
    """A stereo tensor at 16 kHz comes back from the file (dit-lora's own decoder, data/audio.py) as the same tone
    over the frames' span; a clip written without one has no audio stream."""
    import torch

    from dit_lora.data.audio import decode_audio, has_audio

    rate, seconds = 16000, 2.0
    t = torch.arange(int(rate * seconds)) / rate
    tone = 0.5 * torch.sin(2 * torch.pi * 440.0 * t)
    out = write_video(_frames(16), tmp_path / "with_sound.mp4", fps=8, audio=(torch.stack([tone, tone]), rate))
    assert has_audio(out)
    got = decode_audio(out, 0.25, 1.5, rate)
    assert got is not None and got.sound_fraction == 1.0
    assert abs(_peak_hz(got.waveform[0].numpy(), rate) - 440.0) < 2.0 and 0.3 < got.waveform.abs().max() < 0.6
    mono = write_video(_frames(16), tmp_path / "mono.mp4", fps=8, audio=(tone.numpy(), rate))
    assert decode_audio(mono, 0.0, 1.0, rate, channels=1).waveform.shape == (1, rate)
    assert not has_audio(write_video(_frames(16), tmp_path / "silent.mp4", fps=8))


def test_a_sound_of_another_shape_or_rate_is_refused_before_writing(tmp_path):
    import pytest

    for audio, match in (((np.zeros((3, 100)), 16000), "1 or 2 channels"), ((np.zeros((2, 0)), 16000), "got"),
                         ((np.zeros(100), 0), "sample rate")):
        with pytest.raises(ValueError, match=match):
            write_video(_frames(), tmp_path / "x.mp4", fps=4, audio=audio)
    assert not (tmp_path / "x.mp4").exists()
