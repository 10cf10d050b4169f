"""Shared fixtures (tiny offline models and data sets) and the slow-marker check; plain helpers are in helpers.py."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from helpers import CURRENT
from scheduling import keep_groups_together, name_groups_in_node_ids, share_module_fixtures

pytest.register_assert_rewrite("videollm_e2e")  # its checks are the video-LLM e2e tests' assertions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Without a GPU the Triton kernels are checked in Triton's CPU interpreter. The variable is read
# when a kernel is decorated, so it must be set before anything imports dit_lora.kernels.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests run on 2 pytest-xdist workers (DEFAULT_WORKERS); on 2 cores each worker, and each recipe subprocess it
# starts, is faster on one intra-op thread than 2 workers x 2 threads fighting over them (measured).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# transformers' from_pretrained compiles its whole checkpoint-conversion table each call (about 1,100 patterns,
# transformers/conversion_mapping.py), more than re's cache of 512 holds, so every call compiles them all again:
# 0.12 s a text encoder load, 0.02 s with room for them (a cache size only: what a pattern matches is unchanged).
# The suite loads thousands. warm.py's zygotes set the same.
re._MAXCACHE = max(re._MAXCACHE, 4096)  # type: ignore[attr-defined]

#: workers of a plain ``python -m pytest`` (pytest-xdist); ``-n N`` / ``-n 0`` / ``-p no:xdist`` override it
DEFAULT_WORKERS = 2


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Without ``-n``, run on DEFAULT_WORKERS workers, tests sharing an ``xdist_group`` on one worker. Set here, not in
    ``addopts``, so ``-p no:xdist`` (or no pytest-xdist installed) still runs everything in one process."""
    if hasattr(config, "workerinput"):  # a worker: group as the controller does (see pytest_configure_node)
        if config.workerinput.get("dit_lora_loadgroup"):
            config.option.loadgroup = True
        return
    if (not config.pluginmanager.hasplugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER")
            or config.getoption("usepdb", False)):
        return
    if config.option.numprocesses is None:
        config.option.numprocesses = DEFAULT_WORKERS
    if config.option.numprocesses and config.option.dist == "no":  # -n N too: reference runs stay shared
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, on the controller, for each worker it starts. A worker parses the command line again, and
    ``--dist loadgroup`` set above is not on it: without this the worker leaves the ``xdist_group`` marks out of its
    node ids, and the controller hands every test of a group out on its own (each worker then builds the group's
    reference run itself)."""
    node.workerinput["dit_lora_loadgroup"] = node.config.option.dist == "loadgroup"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook names each item's group in its node id
def pytest_collection_modifyitems(config, items):
    import torch

    share_module_fixtures(items)

    # Modules with slow tests first (each module kept together, for its module-scoped fixtures): the two workers
    # then end on the many short tests instead of one worker finishing a long run alone.
    heavy = {item.module.__name__ for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: (item.module.__name__ not in heavy, "/e2e/" not in item.nodeid))
    keep_groups_together(items)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook sends the worker's node ids to the controller
def pytest_collection_finish(session):
    if hasattr(session.config, "workerinput") and session.config.getvalue("loadgroup"):
        name_groups_in_node_ids(session.items)


def pytest_runtest_setup(item):
    # Before any fixture of the test, module-scoped ones (which may run a recipe) included.
    CURRENT["slow"] = item.get_closest_marker("slow") is not None


@pytest.fixture(autouse=True)
def _training_runs_are_marked_slow(request, monkeypatch):
    """A test that trains (a recipe subprocess or ``train()`` in process) must carry ``@pytest.mark.slow``, so
    ``pytest -m "not slow"`` is the quick tier the README promises contributors. Enforced, not remembered."""
    if not CURRENT["slow"]:
        from dit_lora.training import run_start as run_stage

        def refuse(*sections):
            pytest.fail(f"{request.node.nodeid} trains but is not marked slow: add @pytest.mark.slow", pytrace=False)

        monkeypatch.setattr(run_stage, "check_output_dir", refuse)
    yield


@pytest.fixture(autouse=True)
def _signal_handlers_given_back(request):
    """A test that installs dit-lora's process-wide stop handlers (``cli.main(["train", ...])`` or ``recipe.main`` in
    process) must give them back: the next test on the same worker otherwise starts with them installed, and a
    ``train`` there would not own them. Fails the leaking test rather than the innocent one after it."""
    import sys

    signals = sys.modules.get("dit_lora.training.signals")
    before = signals is not None and signals.installed()
    yield
    signals = sys.modules.get("dit_lora.training.signals")
    if signals is not None and signals.installed() and not before:
        signals.release()
        pytest.fail(f"{request.node.nodeid} left dit-lora's signal handlers installed: call signals.release() "
                    "when it ends (try/finally)", pytrace=False)


@pytest.fixture(params=[0o022, 0o027], ids=["umask022", "umask027"])
def umask(request):
    """The test runs under each of two umasks (the usual 022, and 027 that keeps files from others); the process's
    own is given back after it (the umask is process-wide)."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.fixture(scope="session")
def real_layouts(tmp_path_factory):
    """``real_layouts(build, *args, **kwargs)``: a tests/support/real_layout.py folder (``wan_pipeline``, ...) built
    once per session for the tests that read the same layout (mark them with one ``xdist_group``)."""
    from real_layout import LayoutCache

    return LayoutCache(tmp_path_factory.mktemp("real-layouts"))


@pytest.fixture(scope="session")
def tiny_sana(tmp_path_factory) -> Path:
    """A tiny random SanaPipeline saved like a real diffusers repo (bf16 transformer/text encoder, fp32 VAE)."""
    from dit_lora.families.sana.demo import build_tiny_sana_pipeline

    return build_tiny_sana_pipeline(tmp_path_factory.mktemp("models") / "tiny-sana", size="tiny", seed=0)


@pytest.fixture(scope="session")
def shapes_data(tmp_path_factory) -> Path:
    """16 captioned 64 px shape images in the imagefolder layout."""
    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    return make_shapes_dataset(tmp_path_factory.mktemp("data") / "shapes", n=16, size=64, seed=0)


@pytest.fixture(scope="session")
def tiny_dit(tmp_path_factory) -> Path:
    """A tiny random 1000-class DiTPipeline laid out like facebook/DiT-XL-2-256."""
    from dit_lora.families.dit.demo import build_tiny_dit_pipeline

    return build_tiny_dit_pipeline(tmp_path_factory.mktemp("models") / "tiny-dit", seed=0)


#: (width, height) of the mixed-aspect set: 4:1, 1:4, 3:1, 1:3, 3:2, 2:3 and four squares
MIXED_ASPECT_SIZES = [(200, 50), (50, 200), (192, 64), (64, 192), (96, 64), (64, 96), (64, 64), (64, 64), (80, 80),
                      (64, 64)]


@pytest.fixture(scope="session")
def mixed_aspect_data(tmp_path_factory, shapes_data) -> Path:
    """Ten captioned shape images of six aspect ratios and squares (each a shapes image stretched to its size)."""
    import json

    from PIL import Image

    root = tmp_path_factory.mktemp("data") / "mixed"
    root.mkdir()
    rows = [json.loads(line) for line in (shapes_data / "metadata.jsonl").read_text().splitlines()]
    with open(root / "metadata.jsonl", "w") as meta:
        for i, ((width, height), row) in enumerate(zip(MIXED_ASPECT_SIZES, rows)):
            name = f"{i:02d}_{width}x{height}.png"
            Image.open(shapes_data / row["file_name"]).convert("RGB").resize((width, height)).save(root / name)
            meta.write(json.dumps({"file_name": name, "text": row["text"]}) + "\n")
    return root


@pytest.fixture(scope="session")
def shape_classes(tmp_path_factory) -> Path:
    """Shapes in circle/ square/ triangle/ class folders (imagefolder-by-class, no metadata)."""
    from dit_lora.data.synthetic.shapes import make_shapes_class_dataset

    return make_shapes_class_dataset(tmp_path_factory.mktemp("data") / "classes", n=12, size=64, seed=0)


@pytest.fixture(scope="session")
def tiny_cogvideox(tmp_path_factory) -> Path:
    """A tiny random CogVideoX-5b-like text-to-video pipeline (fp32, 9 x 64 x 64)."""
    from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline

    return build_tiny_cogvideox_pipeline(tmp_path_factory.mktemp("models") / "tiny-cogvideox-t2v", task="t2v",
                                         version="1.0-5b")
