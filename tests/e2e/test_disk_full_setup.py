"""A full disk before training starts (the latent cache, the output folder's first file) and a full disk that a
library reports in its own words: one paragraph, exit 2, naming the place and what to do.

As root the disk is a small tmpfs the test mounts (real ENOSPC); otherwise the writers get ``OSError(ENOSPC)``.
``DIT_LORA_TEST_INJECT_ENOSPC=1`` forces the injection as root too.
"""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from helpers import train_in_process
from dit_lora.core.fileio import DiskFullError

pytestmark = [pytest.mark.xdist_group("disk-full")]


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    """A folder on a disk with (almost) no room left: a 4 KiB tmpfs as root, else writers that refuse there."""
    path = tmp_path / "disk"
    path.mkdir()
    mounted = (os.geteuid() == 0 and os.environ.get("DIT_LORA_TEST_INJECT_ENOSPC") != "1" and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(path)], capture_output=True).returncode == 0)
    if not mounted:
        import safetensors.torch

        import dit_lora.core.fileio as fileio

        def refusing(write):
            def wrapper(obj, target, *args, **kwargs):
                if str(target).startswith(str(path)):
                    raise OSError(errno.ENOSPC, "No space left on device", str(target))
                return write(obj, target, *args, **kwargs)
            return wrapper

        monkeypatch.setattr(safetensors.torch, "save_file", refusing(safetensors.torch.save_file))
        monkeypatch.setattr(fileio, "write_text_atomic", lambda p, text: refusing(lambda o, t: None)(text, p))
    yield path
    if mounted:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.mark.slow
def test_a_full_cache_disk_is_one_paragraph_naming_the_cache(full_disk, tmp_path, tiny_sana, shapes_data):
    err, out = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, checkpointing_steps=0,
                                cache_dir=str(full_disk / "cache"))
    assert isinstance(err, DiskFullError) and err.exit_code == 2, repr(err)
    text = str(err)
    assert text.startswith(f"No space left on device while writing the latent cache to {full_disk / 'cache'}"), text
    assert "It needs about " in text and "are free on that file system" in text and "\n" not in text
    assert "Nothing has been trained yet" in text and "--cache_dir" in text and "already cached are kept" in text


@pytest.mark.slow
def test_a_full_output_folder_at_start_is_one_paragraph(full_disk, tmp_path, tiny_sana, shapes_data):
    err, _ = train_in_process(tiny_sana, shapes_data, tmp_path, max_train_steps=2, checkpointing_steps=0,
                              output_dir=str(full_disk / "o"))
    assert isinstance(err, DiskFullError) and err.exit_code == 2, repr(err)
    text = str(err)
    assert text.startswith("No space left on device while writing the list of left-out samples to "
                           f"{full_disk / 'o' / 'quarantine.json'}."), text
    assert "Nothing has been trained yet" in text and "--output_dir" in text


def test_run_recipe_turns_a_library_s_full_disk_into_one_paragraph(tmp_path, monkeypatch):
    """The net for writers that do not say what they write (tracker logs, a library's files): the file, the free
    space there, the fix."""
    import dit_lora.training.loop as loop
    import dit_lora.training.run_start as run_module
    from dit_lora.commands.recipe import run_recipe

    target = tmp_path / "logs" / "events.out"

    def full(cfg, **_):
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        except OSError as err:
            raise RuntimeError("writer thread failed") from err

    monkeypatch.setattr(loop, "train", full)
    # the folder is no model: the run's own resolution (model checks) is not what this test is about
    monkeypatch.setattr(run_module, "resolve_for_training", lambda cfg: cfg)
    with pytest.raises(DiskFullError) as caught:
        run_recipe("sana", ["--skip_doctor", "--pretrained_model_name_or_path", str(tmp_path), "--train_data_dir",
                            str(tmp_path), "--output_dir", str(tmp_path / "out")])
    text = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in text
    assert text.startswith(f"No space left on device while writing {target} (RuntimeError: writer thread failed)")
    assert "are free on that file system" in text and "--resume_from_checkpoint latest" in text


def test_run_recipe_leaves_other_errors_alone(tmp_path, monkeypatch):
    import dit_lora.training.loop as loop
    import dit_lora.training.run_start as run_module
    from dit_lora.commands.recipe import run_recipe

    monkeypatch.setattr(loop, "train", lambda cfg, **_: (_ for _ in ()).throw(RuntimeError("something else")))
    monkeypatch.setattr(run_module, "resolve_for_training", lambda cfg: cfg)
    with pytest.raises(RuntimeError, match="something else"):
        run_recipe("sana", ["--skip_doctor", "--pretrained_model_name_or_path", str(tmp_path), "--train_data_dir",
                            str(tmp_path), "--output_dir", str(tmp_path / "out")])
