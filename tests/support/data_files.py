"""Small data-folder builders the data tests share: images, metadata.jsonl files, sample keys, a log collector.

A plain module on the tests' path (``pythonpath = ["tests/support"]``): ``from data_files import make_image``.
"""

from __future__ import annotations

import json

from PIL import Image


def make_image(path, size=(16, 12), color=(200, 30, 30), fmt=None):
    """A solid-colour image at ``path`` (folders made), in ``fmt`` or the format its suffix names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path, format=fmt)
    return path


def write_jsonl(path, rows):
    """``rows`` as a JSON Lines file (folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def keys(samples):
    """The samples' keys, in order."""
    return [s.key for s in samples]


class Log(list):
    """Collects log lines; ``log=Log()`` stands in for print."""

    def __call__(self, line):
        self.append(line)

    @property
    def text(self):
        return "\n".join(self)


def bad_caption_folder(root):
    """Six captioned images whose caption files are in six encodings: UTF-8, UTF-8 with a byte-order mark and UTF-16
    with one (all read), Latin-1, Shift-JIS and UTF-16 without a byte-order mark (none of them UTF-8)."""
    texts = {
        "utf8": "a café".encode(),
        "utf8_bom": b"\xef\xbb\xbf" + "a café".encode(),
        "utf16_bom": "a café".encode("utf-16"),
        "latin1": "a café".encode("latin-1"),
        "shift_jis": "猫の写真".encode("shift_jis"),
        "utf16_no_bom": "a cat".encode("utf-16-le"),
    }
    for i, (name, data) in enumerate(texts.items()):
        make_image(root / f"{name}.png", color=(40 * i, 0, 0))
        (root / f"{name}.txt").write_bytes(data)
    return root


def write_rotated_clip(path, *, degrees: int, frames: int = 5):
    """A clip stored 64 wide x 32 tall, red in its left quarter, whose display matrix turns it ``degrees``
    counter-clockwise (what a phone writes for a portrait recording)."""
    import av
    import numpy as np

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=8)
        stream.width, stream.height, stream.pix_fmt = 64, 32, "yuv420p"
        stream.set_display_rotation(degrees)
        for _ in range(frames):
            array = np.full((32, 64, 3), 20, np.uint8)
            array[:, :16] = (230, 20, 20)
            for packet in stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path
