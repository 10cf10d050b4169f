"""Tests for dit_lora.data.paths: a path written in a data file stays inside the data folder, or is refused."""

from __future__ import annotations

import os

from dit_lora.data.paths import locate


def test_relative_paths_inside_are_placed_and_dots_are_resolved_on_the_text(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    assert locate(root, "a.png") == ("a.png", str(root / "a.png"), None)
    assert locate(root, "sub\\b.png") == ("sub/b.png", str(root / "sub" / "b.png"), None)
    # A metadata file in a subfolder may name a file of the parent folder: still inside the data folder.
    assert locate(root, "../c.png", rel_dir="sub").key == "c.png"
    assert locate(root, "x/../d.png").path == str(root / "d.png")


def test_paths_that_leave_the_folder_are_refused_with_the_reason(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    for written in ("../outside/secret.png", "../../../../etc/hostname", "sub/../../x.png", "/etc/hostname",
                    str(tmp_path / "outside" / "secret.png"), str(tmp_path / "data-other" / "a.png")):
        located = locate(root, written, field="metadata.jsonl line 2: file_name")
        assert located.path is None, written
        reason = located.refused
        assert reason.startswith(f"metadata.jsonl line 2: file_name {written!r} leaves the data folder {root}")
        assert "never opened" in reason and "symlink" in reason
    assert locate(root, "../../x.png", rel_dir="sub").refused is not None


def test_absolute_paths_inside_the_folder_get_their_relative_key(tmp_path):
    real = tmp_path / "disk" / "data"
    real.mkdir(parents=True)
    link = tmp_path / "data"
    link.symlink_to(real, target_is_directory=True)
    assert locate(real, str(real / "a.png")) == ("a.png", str(real / "a.png"), None)
    # The folder given through a link: an absolute path written through either name is inside.
    assert locate(link, str(link / "s" / "a.png")) == ("s/a.png", str(link / "s" / "a.png"), None)
    assert locate(link, str(real / "s" / "a.png")) == ("s/a.png", str(link / "s" / "a.png"), None)


def test_symlinks_inside_the_folder_are_followed_the_written_path_decides(tmp_path):
    other_disk = tmp_path / "other"
    other_disk.mkdir()
    root = tmp_path / "data"
    root.mkdir()
    os.symlink(other_disk, root / "images")
    located = locate(root, "images/a.png")
    assert located.refused is None and located.path == str(root / "images" / "a.png")
    # The same file named by where the link points is outside, as written.
    assert locate(root, str(other_disk / "a.png")).refused is not None
