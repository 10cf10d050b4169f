"""Clips with a sound track for the audio tests (tests/data/test_audio.py, tests/kit/test_clip_audio.py):
an mp4 written with PyAV, a sine on its AAC track."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_clip(path: Path, *, seconds: float = 2.0, fps: int = 8, tone: float | None = 440.0, rate: int = 44100,
               layout: str = "stereo", audio_delay: float = 0.0, audio_seconds: float | None = None) -> Path:
    """An mp4 of ``seconds`` of 32x32 video at ``fps`` and, unless ``tone`` is None, an AAC track of a sine at
    ``tone`` Hz (``audio_seconds`` long, starting ``audio_delay`` seconds after the first frame)."""
    import av

    with av.open(str(path), "w") as out:
        video = out.add_stream("mpeg4", rate=fps)
        video.width = video.height = 32
        video.pix_fmt = "yuv420p"
        audio = None
        if tone is not None:
            audio = out.add_stream("aac", rate=rate)
            audio.layout = layout
        for i in range(round(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), i * 7 % 255, np.uint8), format="rgb24")
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode():
            out.mux(packet)
        if audio is not None:
            n = round((audio_seconds if audio_seconds is not None else seconds) * rate)
            wave = (0.5 * np.sin(2 * np.pi * tone * np.arange(n) / rate)).astype(np.float32)
            channels = 1 if layout == "mono" else 2
            start = round(audio_delay * rate)
            for k in range(0, n, 1024):
                chunk = np.stack([wave[k : k + 1024]] * channels)
                frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=layout)
                frame.sample_rate, frame.pts = rate, start + k
                for packet in audio.encode(frame):
                    out.mux(packet)
            for packet in audio.encode():
                out.mux(packet)
    return path
