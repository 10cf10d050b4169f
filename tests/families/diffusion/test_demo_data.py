"""families/diffusion/demo_data.py: the sizes a refused ``--resolution`` is told to use, and the demo data drawn
into an empty ``--train_data_dir`` only (a user's own folder kept as it is, and said)."""

from __future__ import annotations

from types import SimpleNamespace

from dit_lora.families.diffusion.demo_data import demo_data, nearest_sizes


def test_nearest_sizes_name_both_multiples_or_only_the_first():
    assert nearest_sizes(520, 16) == "512 or 528"
    assert nearest_sizes(8, 16) == "16"


def _cfg(directory):
    return SimpleNamespace(data=SimpleNamespace(train_data_dir=directory, resolution=32),
                           model=SimpleNamespace(demo_num_images=2))


def test_an_empty_folder_gets_the_demo_data(tmp_path):
    drawn = []
    assert demo_data(_cfg(str(tmp_path / "new")), draw=drawn.append) is True
    assert drawn == [str(tmp_path / "new")]


def test_a_user_folder_is_kept_and_said(tmp_path, capsys):
    (tmp_path / "mine.png").write_bytes(b"not drawn by the demo")
    drawn = []
    assert demo_data(_cfg(str(tmp_path)), draw=drawn.append) is False
    assert drawn == [] and (tmp_path / "mine.png").read_bytes() == b"not drawn by the demo"
    assert f"--train_data_dir {tmp_path} already holds data; training on it as it is" in capsys.readouterr().out


def test_no_folder_draws_nothing():
    assert demo_data(_cfg(None), draw=lambda d: (_ for _ in ()).throw(AssertionError("drawn"))) is False
