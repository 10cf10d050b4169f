"""demo/shapes.py: the captioned shapes data set (deterministic, idempotent, loads as an imagefolder, safe to build
from two processes at once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT, make_shapes_dataset
from helpers import ROOT
from offline import no_network


@pytest.fixture(scope="module", autouse=True)
def _offline():
    yield from no_network()



def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def test_shapes_dataset_layout_determinism_and_idempotence(tmp_path):
    a = make_shapes_dataset(tmp_path / "a", n=12, size=64, seed=3)
    b = make_shapes_dataset(tmp_path / "b", n=12, size=64, seed=3)
    c = make_shapes_dataset(tmp_path / "c", n=12, size=64, seed=4)

    pngs = sorted(a.glob("*.png"))
    assert len(pngs) == 12
    lines = [json.loads(line) for line in (a / "metadata.jsonl").read_text().splitlines()]
    assert [row["file_name"] for row in lines] == [p.name for p in pngs]
    for row in lines:
        words = row["text"].split()
        assert words[0] == "a" and words[-1] == "background" and words[1] != words[-2]

    snap_a = _snapshot(a)
    assert {k: v[0] for k, v in snap_a.items()} == {k: v[0] for k, v in _snapshot(b).items()}
    assert {k: v[0] for k, v in snap_a.items()} != {k: v[0] for k, v in _snapshot(c).items()}

    assert make_shapes_dataset(a, n=12, size=64, seed=3) == a
    assert _snapshot(a) == snap_a  # untouched: same bytes, same mtimes
    # Other parameters replace the stale build.
    make_shapes_dataset(a, n=5, size=32, seed=3)
    assert len(list(a.glob("*.png"))) == 5
    assert SHAPES_VALIDATION_PROMPT.endswith("background")


def test_shapes_dataset_loads_as_imagefolder(tmp_path):
    datasets = pytest.importorskip("datasets")
    directory = make_shapes_dataset(tmp_path / "shapes", n=8, size=32, seed=0)
    ds = datasets.load_dataset("imagefolder", data_dir=str(directory), split="train", cache_dir=str(tmp_path / "c"))
    assert len(ds) == 8
    assert set(ds.column_names) == {"image", "text"}
    assert ds[0]["image"].size == (32, 32)
    assert ds[0]["text"].endswith("background")


def test_concurrent_builds_do_not_corrupt(tmp_path):
    target = tmp_path / "shared"
    code = (
        "import sys; from dit_lora.data.synthetic.shapes import make_shapes_dataset; "
        "make_shapes_dataset(sys.argv[1], n=150, size=64, seed=1)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(target)], env=env) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(list(target.glob("*.png"))) == 150
    assert len((target / "metadata.jsonl").read_text().splitlines()) == 150
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers
