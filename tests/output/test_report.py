"""The loss curve: a real matplotlib plot when the extra is installed, and nothing (said once) without it."""

from __future__ import annotations

import sys

import numpy as np
from PIL import Image

from dit_lora.output.report import plot_loss_curve


def test_loss_curve_is_a_plot_with_axes_and_skips_nonfinite_points(tmp_path):
    steps = list(range(10, 210, 10))
    losses = [1.0 / (1 + i) for i in range(20)]
    losses[5], losses[6] = float("nan"), None  # a window with no finite loss leaves a gap, not a crash
    path = plot_loss_curve(steps, losses, tmp_path / "loss_curve.png", rollbacks=[70])
    assert path == tmp_path / "loss_curve.png"
    image = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape == (360, 640, 3)
    # Axes, tick labels and lines: dark pixels and more than a handful of colours, not a blank canvas.
    assert (image.sum(axis=2) < 200).sum() > 1000
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 20


def test_loss_curve_without_points_still_writes_a_labelled_plot(tmp_path):
    assert plot_loss_curve([], [], tmp_path / "empty.png").is_file()


def test_without_matplotlib_no_curve_and_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    lines: list[str] = []
    assert plot_loss_curve([1, 2], [0.5, 0.4], tmp_path / "loss.png", log=lines.append) is None
    assert not (tmp_path / "loss.png").exists()
    assert len(lines) == 1 and "matplotlib" in lines[0] and "dit-lora[plot]" in lines[0]
