"""What a plain (non-editable) `pip install .` ships: every data file the package reads, not only its .py files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers import ROOT


@pytest.mark.slow
def test_the_wheel_carries_every_file_of_the_package(tmp_path):
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    wanted = {path for path in tracked if path.startswith("dit_lora/")}
    source = tmp_path / "src"  # the tracked files only: a checkout's build/ and egg-info would hide a missing rule
    for path in [p for p in tracked if p.startswith("dit_lora/") or "/" not in p]:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, source / path)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("dit_lora-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert "dit_lora/families/dit/imagenet_wnids.txt" in wanted
    assert sorted(wanted - shipped) == []
