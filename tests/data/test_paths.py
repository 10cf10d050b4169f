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
        assert "never opened" in reason and "links inside it are not followed out of it" in reason
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


def test_a_written_path_through_a_link_out_of_the_folder_is_refused_a_link_inside_is_followed(tmp_path):
    """Links count where they lead: a data folder downloaded with a link to the user's files must not reach them."""
    other_disk = tmp_path / "other"
    other_disk.mkdir()
    root = tmp_path / "data"
    (root / "real").mkdir(parents=True)
    os.symlink(other_disk, root / "images")
    os.symlink(root / "real", root / "alias")
    located = locate(root, "images/a.png", field="metadata.jsonl line 1: file_name")
    assert located.path is None and located.refused.startswith(
        f"metadata.jsonl line 1: file_name 'images/a.png' is reached through a link that leads out of the data folder "
        f"{root} (to {other_disk / 'a.png'}; refused, never opened)")
    assert locate(root, str(root / "images" / "a.png")).refused is not None  # absolute, through the link: the same
    assert locate(root, str(other_disk / "a.png")).refused is not None
    # inside pointing inside: followed, named as written
    assert locate(root, "alias/b.png") == ("alias/b.png", str(root / "alias" / "b.png"), None)


def test_the_folder_walk_leaves_out_links_that_lead_out_or_loop_and_says_so_once(tmp_path):
    from dit_lora.data.paths import FolderWalk

    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    for name in ("a.png", "sub/b.png"):
        (root / name).write_bytes(b"x")
    (tmp_path / "secret.png").write_bytes(b"x")
    os.symlink(tmp_path, root / "parent")  # the link: the folder's parent
    os.symlink(tmp_path / "secret.png", root / "s.png")
    os.symlink(root / "loop1", root / "loop2.png")
    os.symlink(root / "loop2.png", root / "loop1")
    os.symlink(root / "sub", root / "again")  # a folder link inside: its files are listed once, under sub/
    os.symlink(root / "a.png", root / "copy.png")  # a file link inside: listed, a duplicate
    walk = FolderWalk(root)
    files = [f"{rel}/{f}" if rel else f for _, rel, _, names in walk for f in names]
    assert files == ["a.png", "copy.png", "sub/b.png"]
    assert sorted(k for k, _ in walk.left_out) == ["loop1", "loop2.png", "parent", "s.png"]
    assert dict(walk.left_out)["parent"] == str(tmp_path) and dict(walk.left_out)["loop1"] == "a loop"
    said: list[str] = []
    walk.report(said.append)
    FolderWalk(root).report(said.append)  # nothing listed yet: nothing to say
    again = FolderWalk(root)
    list(again)
    again.report(said.append)  # the same folder listed twice in one process: said once
    assert len(said) == 3, said
    assert said[0].startswith(f"--train_data_dir {root}: 4 link(s) lead out of the folder or loop and are left out")
    assert f"never opened (e.g. 'parent' -> {tmp_path})" in said[0] and "Copy those files into the folder" in said[0]
    assert "1 folder link(s) point inside the folder and are not followed" in said[1] and "again" in said[1]
    assert "1 file link(s) point to another file of the folder" in said[2] and "copy.png" in said[2]
