"""Writing video frames to MP4 with PyAV (no imageio: ``diffusers.utils.export_to_video`` needs it).

:func:`write_video` encodes a list of frames (PIL images or ``(H, W, 3)`` uint8 arrays) as H.264
(``libx264``) when this PyAV/FFmpeg build has that encoder, else MPEG-4 Part 2, always ``yuv420p``
so ordinary players and browsers open the file, and a sound track with them when given one (AAC, as players expect
in an MP4: a model that generates audio with its video, LTX-2, has its clips written with their sound). Video
encoding is single-threaded, so equal frames and settings give byte-identical video streams.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import numpy as np

from dit_lora.core.fileio import atomic_write

__all__ = ["pick_video_codec", "snippet_write_video", "write_video"]


def pick_video_codec() -> str:
    """``libx264`` if this PyAV/FFmpeg build can encode it, else ``mpeg4``."""
    import av

    available = av.codecs_available
    for name in ("libx264", "mpeg4"):
        if name in available:
            try:
                av.codec.Codec(name, "w")
                return name
            except Exception:
                continue
    raise RuntimeError("this PyAV build has neither a libx264 nor an mpeg4 encoder")


def snippet_write_video(fps: float, name: str = "sample.mp4") -> str:
    """The model cards' and guides' lines that write ``video`` (the pipeline's PIL frames) to ``name`` with PyAV.

    Not ``diffusers.utils.export_to_video``: it needs imageio and imageio-ffmpeg, else OpenCV, and the base install has
    none of them; PyAV is a dependency of dit-lora. ``libx264`` and ``yuv420p``, as :func:`write_video` prefers.
    """
    rate = Fraction(fps).limit_denominator(1001)
    shown = str(rate.numerator) if rate.denominator == 1 else f"Fraction({rate.numerator}, {rate.denominator})"
    fraction = "" if rate.denominator == 1 else "from fractions import Fraction\n"
    return (
        "import av  # PyAV writes the MP4 (diffusers' export_to_video needs imageio or OpenCV)\n"
        f"{fraction}"
        f'with av.open({json.dumps(name)}, "w") as container:\n'
        f'    stream = container.add_stream("libx264", rate={shown})\n'
        '    stream.width, stream.height, stream.pix_fmt = video[0].width, video[0].height, "yuv420p"\n'
        "    for frame in video:\n"
        "        container.mux(stream.encode(av.VideoFrame.from_image(frame)))\n"
        "    container.mux(stream.encode())\n"
    )


def _as_array(frame: Any) -> np.ndarray:
    """One frame as a contiguous ``(H, W, 3)`` uint8 RGB array."""
    if hasattr(frame, "convert"):  # PIL image
        frame = np.asarray(frame.convert("RGB"))
    array = np.asarray(frame)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"a frame must be RGB (H, W, 3), got shape {array.shape}")
    if array.dtype != np.uint8:
        if np.issubdtype(array.dtype, np.floating):  # [0, 1] floats, as diffusers' "np" output
            array = np.clip(np.round(array * 255.0), 0, 255)
        array = array.astype(np.uint8)
    return np.ascontiguousarray(array)


def write_video(
    frames: Iterable[Any],
    path: str | os.PathLike,
    *,
    fps: int = 8,
    crf: int = 18,
    faststart: bool = True,
    audio: tuple[Any, int] | None = None,
) -> Path:
    """Encode ``frames`` to the MP4 file ``path`` at ``fps`` frames per second; return the path.

    ``frames``: PIL images or ``(H, W, 3)`` arrays (uint8, or floats in [0, 1]), all the same size,
    with even width and height (yuv420p halves the chroma planes). ``crf`` is libx264's quality
    (lower: better, 18 is visually lossless); the mpeg4 fallback uses a fixed 2 Mbit/s.
    ``faststart`` puts the index first, as web-ready files have it. ``audio``: ``(waveform, rate)``, the sound
    written beside the frames as an AAC track starting with the first frame (``waveform``: ``(samples,)`` or
    ``(channels, samples)`` floats in [-1, 1], one or two channels, an array or a tensor; a louder sample is clipped
    to full scale, as any encoder of a fixed-point format would).
    """
    arrays = [_as_array(f) for f in frames]
    if not arrays:
        raise ValueError("no frames to write")
    height, width = arrays[0].shape[:2]
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError("all frames must have the same size")
    if height % 2 or width % 2:
        raise ValueError(f"width and height must be even for yuv420p, got {width}x{height}")
    sound = None if audio is None else (_as_waveform(audio[0]), int(audio[1]))
    if sound is not None and sound[1] <= 0:
        raise ValueError(f"the audio's sample rate must be positive, got {sound[1]}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomically (a temporary file renamed over the path): a killed run leaves no half-written MP4, and a symbolic
    # link planted at the path is replaced, never written through.
    atomic_write(path, lambda tmp: _encode(arrays, tmp, fps=fps, crf=crf, faststart=faststart, sound=sound))
    return path


def _as_waveform(waveform: Any) -> np.ndarray:
    """A sound as a contiguous float32 ``(channels, samples)`` array in [-1, 1], one or two channels."""
    if hasattr(waveform, "detach"):  # a torch tensor
        waveform = waveform.detach().float().cpu().numpy()
    wave = np.asarray(waveform, dtype=np.float32)
    if wave.ndim == 1:
        wave = wave[None]
    if wave.ndim != 2 or wave.shape[0] not in (1, 2) or wave.shape[1] == 0:
        raise ValueError(f"audio must be (samples,) or (channels, samples) with 1 or 2 channels, got {wave.shape}")
    return np.ascontiguousarray(np.clip(wave, -1.0, 1.0))


def _mux_audio(container, stream, wave: np.ndarray, rate: int) -> None:
    """``wave`` into the AAC ``stream`` of ``container`` from time 0 (the first frame's), in frames of 1,024
    samples."""
    import av

    for start in range(0, wave.shape[1], 1024):
        chunk = np.ascontiguousarray(wave[:, start : start + 1024])
        frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=stream.layout.name)
        frame.sample_rate, frame.pts = rate, start
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


def _encode(
    arrays: list, path: Path, *, fps: int, crf: int, faststart: bool, sound: tuple[np.ndarray, int] | None = None
) -> None:
    import av

    height, width = arrays[0].shape[:2]
    codec = pick_video_codec()
    options = {"movflags": "+faststart"} if faststart else {}
    with av.open(str(path), mode="w", format="mp4", options=options) as container:
        # a video codec's name (pick_video_codec) gives a video stream; PyAV types a str codec as any stream kind
        stream = cast(av.VideoStream, container.add_stream(codec, rate=Fraction(fps)))
        stream.width = width
        stream.height = height
        stream.pix_fmt = "yuv420p"
        stream.codec_context.thread_count = 1  # bit-identical output run to run
        if codec == "libx264":
            stream.options = {"crf": str(crf), "preset": "veryfast", "bframes": "0"}
        else:
            stream.codec_context.bit_rate = 2_000_000
        sound_stream = None
        if sound is not None:  # every stream is added before the first packet is muxed (the header is written then)
            sound_stream = cast(av.AudioStream, container.add_stream("aac", rate=sound[1]))
            sound_stream.layout = "mono" if sound[0].shape[0] == 1 else "stereo"
        for array in arrays:
            for packet in stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if sound is not None and sound_stream is not None:
            _mux_audio(container, sound_stream, *sound)
