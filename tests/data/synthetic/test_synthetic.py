"""demo/__init__.py: building a demo folder atomically (never over a folder the user made)."""

from __future__ import annotations

import pytest

from dit_lora.data.synthetic import build_directory_atomically


def test_atomic_build_refuses_foreign_directory(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        build_directory_atomically(foreign, "marker.json", {"v": 1}, lambda tmp: None)
    assert (foreign / "precious.txt").read_text() == "keep me"
    # An empty directory (e.g. made by the caller) is fine to fill.
    empty = tmp_path / "empty"
    empty.mkdir()
    build_directory_atomically(empty, "marker.json", {"v": 1}, lambda tmp: (tmp / "x").write_text("x"))
    assert (empty / "x").read_text() == "x"


def test_the_shapes_api_is_reached_lazily_and_nothing_names_a_family():
    import dit_lora.data.synthetic as demo
    from dit_lora.data.synthetic import shapes

    assert demo.make_shapes_dataset is shapes.make_shapes_dataset
    assert not [name for name in demo.__all__ if "sana" in name.lower() or "dit" in name.lower()]
    with pytest.raises(AttributeError):
        demo.build_tiny_sana_pipeline  # the family's own: dit_lora.families.sana.demo


def test_a_built_folder_s_files_get_the_umask_s_mode(tmp_path, umask):
    """A demo model folder is readable as every other file the run writes: safetensors and save_pretrained create
    their files 0600, the build gives them what ``open()`` would have (0644 under the usual umask)."""
    import os

    def build(tmp):
        (tmp / "sub").mkdir()
        weights = tmp / "sub" / "model.safetensors"
        weights.write_bytes(b"x")
        os.chmod(weights, 0o600)

    target = tmp_path / "built"
    build_directory_atomically(target, "marker.json", {"v": 1}, build)
    assert (target / "sub" / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask
