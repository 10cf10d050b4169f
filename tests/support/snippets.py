"""Run the python blocks that dit-lora prints (model cards, README, guides) as written, and check that the adapter they
load changes what they make.

A block runs in its own namespace in a temporary working directory (it may write ``sample.png``/``sample.mp4`` and read
the inputs a user brings: ``clip.mp4``, ``first_frame.png``, ``before.png``). Hub ids in the text are served from a
stand-in Hub cache (:func:`hub_cache`: each id a snapshot that is a tiny offline folder, the Hub itself offline), so
the text is not edited. A block that calls a diffusers pipeline runs three times, each with :data:`AS_WRITTEN_STEPS`
inference steps (the demo cards' 4 to 10 steps show the adapter no better than two, at up to five times the cost):
as written in the dtypes it names (it runs and writes what it says it writes), then twice in fp32
(:func:`pipeline_calls`: this CPU has no native bf16, where a bf16 step is about six times an fp32 one), with its
adapter and with every adapter layer it loads disabled (:func:`adapters_disabled`); what those two made (``image``,
``video`` or ``answer``) must differ. Any other block (a video LLM's) runs twice, as written.

Docs blocks say in the markdown just above the block whether they run: ``<!-- snippet: runs after: CONFIG -->`` (the
demo config, under ``recipes/configs/``, whose run stands in for the reader's: :func:`doc_runs`) or ``<!-- snippet:
not run: REASON -->``. :func:`python_blocks` reads the marker; a python block with neither fails
``tests/test_doc_snippets.py``. So a family's guide says itself which of its blocks run, on which demo.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

#: the marker that exempts the python block below it from running, with its reason
EXEMPT = re.compile(r"<!--\s*snippet:\s*not run:\s*(?P<reason>[^>]*?)\s*-->\s*$")
#: the marker that runs the python block below it after the run of a demo config (relative to recipes/configs/)
RUNS_AFTER = re.compile(r"<!--\s*snippet:\s*runs after:\s*(?P<config>\S+)\s*-->\s*$")
_FENCE = re.compile(r"^```python\n(?P<code>.*?)^```", re.MULTILINE | re.DOTALL)
#: the variables a snippet leaves its result in, by kind
RESULTS = ("video", "answer", "image")  # a video snippet's `image` is its input (image-to-video)


@dataclass(frozen=True)
class Block:
    """One python block of a markdown file: its code, its 0-based index in the file, the exemption's reason and the
    demo config it runs after (at most one of the two: its marker)."""

    code: str
    index: int
    exempt: str | None
    runs_after: str | None = None


def python_blocks(markdown: str) -> list[Block]:
    """Every ```python block of ``markdown``, each with the marker on the last non-blank line above it: the reason of
    a ``<!-- snippet: not run: ... -->``, the config of a ``<!-- snippet: runs after: ... -->`` (neither: None)."""
    blocks = []
    for i, match in enumerate(_FENCE.finditer(markdown)):
        before = markdown[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        exempt, runs = EXEMPT.search(before), RUNS_AFTER.search(before)
        blocks.append(Block(match.group("code"), i, exempt.group("reason") if exempt else None,
                            runs.group("config") if runs else None))
    return blocks


def card_block(output_dir: Path) -> str:
    """The usage snippet of a run's model card (its one python block)."""
    (block,) = python_blocks((Path(output_dir) / "README.md").read_text())
    return block.code


@contextlib.contextmanager
def hub_cache(root: Path, repos: dict[str, Path], revisions: tuple[str, ...] = ()) -> Iterator[None]:
    """The Hub, offline, as a cache whose snapshot of each repo id is the given local folder (a link to it), at
    ``main`` and each of ``revisions``."""
    import huggingface_hub.constants as constants

    cache = Path(root) / "hub-cache"
    for repo, folder in repos.items():
        entry = cache / f"models--{repo.replace('/', '--')}"
        sha = f"{abs(hash(repo)) % 16**40:040x}"
        (entry / "snapshots").mkdir(parents=True, exist_ok=True)
        (entry / "refs").mkdir(exist_ok=True)
        for ref in ("main", *revisions):  # a revision the text names (DiT's "refs/pr/1") is this snapshot too
            (entry / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
            (entry / "refs" / ref).write_text(sha)
        link = entry / "snapshots" / sha
        if not link.exists():
            link.symlink_to(Path(folder).resolve(), target_is_directory=True)
    patch = pytest.MonkeyPatch()
    patch.setattr(constants, "HF_HUB_CACHE", str(cache))
    patch.setattr(constants, "HF_HUB_OFFLINE", True)
    patch.setenv("HF_HUB_OFFLINE", "1")
    try:
        yield
    finally:
        patch.undo()


@contextlib.contextmanager
def adapters_disabled() -> Iterator[None]:
    """Every PEFT adapter layer (LoRA, DoRA, LoKr, LoHa: what diffusers' ``load_lora_weights``, PEFT and
    ``dit_lora.load_adapter`` put in place) answers as its base layer: the snippet loads everything as written (DiT's
    class names, a video LLM's projector) and only the adapter's update is left out."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    patch = pytest.MonkeyPatch()
    patch.setattr(BaseTunerLayer, "disable_adapters", property(lambda self: True))
    try:
        yield
    finally:
        patch.undo()


def _result(namespace: dict) -> object:
    """What the snippet made: the image or video as one uint8 array, or the answer's text."""
    for name in RESULTS:
        if name in namespace:
            value = namespace[name]
            if isinstance(value, str):
                return value
            frames = value if isinstance(value, (list, tuple)) else [value]
            return np.stack([np.asarray(f) for f in frames])
    raise AssertionError(f"the snippet left none of {RESULTS} (its names: {sorted(namespace)})")


def run_block(code: str, cwd: Path, *, inputs: dict[str, Path] | None = None, name: str = "snippet") -> object:
    """Run ``code`` as a script in ``cwd`` (the ``inputs`` put there under their names first: a file copied, a folder
    linked); return its result."""
    cwd.mkdir(parents=True, exist_ok=True)
    for target, source in (inputs or {}).items():
        if Path(source).is_dir():
            (cwd / target).symlink_to(Path(source).resolve(), target_is_directory=True)
        else:
            shutil.copyfile(source, cwd / target)
    before = os.getcwd()
    os.chdir(cwd)
    try:
        namespace: dict = {"__name__": "__main__"}
        exec(compile(code, name, "exec"), namespace)
    finally:
        os.chdir(before)
    return _result(namespace)


def check_block(
    code: str, tmp: Path, *, inputs: dict[str, Path] | None = None, name: str = "snippet", text_changes: bool = True
) -> object:
    """Run ``code`` as written (each run in its own folder under ``tmp``), assert that it wrote what it says it
    writes, and that its adapter changes the result: a pipeline's in fp32 (the module docstring), a text answer only
    when ``text_changes`` (a tiny model's greedy answer can be the same few tokens, or none, after a short run).
    Returns the adapter's result (fp32 for a pipeline)."""
    pipeline = "diffusers" in code
    if pipeline:  # as written, in the dtypes it names: what runs, and what it writes
        with pipeline_calls(STEPS_OF_A_RUN):
            run_block(code, tmp / "as-written", inputs=inputs, name=name)
    with pipeline_calls(STEPS_OF_A_RUN if pipeline else None, fp32=pipeline):
        got = run_block(code, tmp / "with-adapter", inputs=inputs, name=name)
        with adapters_disabled():
            without = run_block(code, tmp / "without-adapter", inputs=inputs, name=name)
    for written in re.findall(r"""["']([\w.-]+\.(?:png|mp4))["']""", code):
        if (written not in (inputs or {})) and re.search(rf"""(save|open)\(["']{re.escape(written)}["'][,)]""", code):
            for run in ("as-written", "with-adapter") if pipeline else ("with-adapter",):
                assert (tmp / run / written).stat().st_size > 0, f"{name}: {written} not written ({run})"
    if isinstance(got, str):
        assert got != without or not text_changes, f"{name}: the answer is the same without the adapter: {got!r}"
    else:
        assert got.shape == without.shape and not np.array_equal(got, without), f"{name}: the adapter changed nothing"
    return got


#: the inference steps of each run of a pipeline block: enough for every scheduler to step (and a multistep solver to
#: take its second order) and for the adapter to change the result, few enough that bf16 on a CPU is seconds
AS_WRITTEN_STEPS = 2
STEPS_OF_A_RUN = {"num_inference_steps": AS_WRITTEN_STEPS}


@contextlib.contextmanager
def pipeline_calls(overrides: dict[str, int] | None = None, *, fp32: bool = False) -> Iterator[None]:
    """Stand-ins for every diffusers pipeline call inside: the call arguments ``overrides`` names (those the pipeline
    takes) replace the text's, and with ``fp32`` a pipeline on a CPU is cast to fp32 before it runs (or before its
    ``encode_prompt`` runs, for a snippet that encodes first). Nested uses combine, the inner one's arguments
    winning."""
    import torch
    from diffusers import DiffusionPipeline

    frame = (dict(overrides or {}), fp32)
    patch = pytest.MonkeyPatch()
    todo = [DiffusionPipeline]
    while todo:  # the pipeline classes imported by now whose call no outer use wraps yet
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        call = vars(cls).get("__call__")
        if call is not None and not getattr(call, "_stand_in", False):
            accepted = set(inspect.signature(call).parameters)

            def wrapped(self, *args, _call=call, _accepted=accepted, **kwargs):
                merged = {k: v for given, _ in _CALL_FRAMES for k, v in given.items() if k in _accepted}
                if any(cast for _, cast in _CALL_FRAMES) and self.device.type == "cpu":
                    self.to(torch.float32)
                return _call(self, *args, **{**kwargs, **merged})

            wrapped._stand_in = True  # type: ignore[attr-defined]
            patch.setattr(cls, "__call__", wrapped)
        encode = vars(cls).get("encode_prompt")
        if encode is not None and not getattr(encode, "_stand_in", False):  # a snippet that encodes first (Chroma's)

            def cast_first(self, *args, _encode=encode, **kwargs):
                if any(cast for _, cast in _CALL_FRAMES) and self.device.type == "cpu":
                    self.to(torch.float32)
                return _encode(self, *args, **kwargs)

            cast_first._stand_in = True  # type: ignore[attr-defined]
            patch.setattr(cls, "encode_prompt", cast_first)
    _CALL_FRAMES.append(frame)
    try:
        yield
    finally:
        _CALL_FRAMES.remove(frame)
        patch.undo()


#: the :func:`pipeline_calls` in force, outermost first
_CALL_FRAMES: list[tuple[dict[str, int], bool]] = []


def user_inputs(code: str, data: Path, scratch: Path) -> dict[str, Path]:
    """The files a snippet reads that a user brings, taken from the run's data (a file, or a folder): each relative
    ``load_image("NAME")`` an image of the data (a clip's data: a frame of its first clip, written in ``scratch``),
    ``"clip.mp4"`` a clip, ``"reference.mp4"`` a reference clip (``references/``) of an in-context data set."""
    folder = data if data.is_dir() else data.parent
    inputs: dict[str, Path] = {}
    for name in re.findall(r"""load_image\(["']([^"'/]+)["']\)""", code):
        images = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".png", ".jpg"))
        inputs[name] = images[0] if images else _first_frame(sorted(folder.rglob("*.mp4"))[0], scratch / name)
    if re.search(r"""["']clip\.mp4["']""", code):
        inputs["clip.mp4"] = sorted(folder.rglob("*.mp4"))[0]
    if re.search(r"""["']reference\.mp4["']""", code):  # an in-context card's: a reference clip of the data
        clips = sorted(folder.rglob("*.mp4"))
        inputs["reference.mp4"] = next((c for c in clips if c.parent.name == "references"), clips[0])
    return inputs


def _first_frame(clip: Path, target: Path) -> Path:
    """The first frame of ``clip`` written as the image ``target``."""
    import av

    with av.open(str(clip)) as container:
        frame = next(container.decode(video=0))
    target.parent.mkdir(parents=True, exist_ok=True)
    frame.to_image().save(target)
    return target


def check_card(output_dir: Path, data: Path, tmp: Path, *, repo_id: str = "me/demo-lora") -> None:
    """A run's model card snippet (:func:`card_block`) runs as written and the adapter changes what it makes; the
    card ``dit-lora push --hub_model_id REPO`` uploads (``output.hub.repo_card``: the adapter from the repo, served by
    :func:`hub_cache`) names no local path of the run and makes the same result."""
    from dit_lora.output.hub import repo_card

    code = card_block(output_dir)
    with edit_areas(code, code):
        local = check_block(code, tmp / "card", inputs=user_inputs(code, data, tmp), name=f"{output_dir.name}/README.md")
    pushed = repo_card(Path(output_dir), repo_id, log=lambda line: None)
    assert pushed is not None and str(Path(output_dir).resolve()) not in pushed, "the pushed card names a local path"
    (block,) = python_blocks(pushed)
    assert repo_id in block.code
    # a base no published checkpoint matches (the demo's) is loaded by its folder name: the reader's copy is there
    config = json.loads((Path(output_dir) / "train_summary.json").read_text())["config"]
    base = Path(config["pretrained_model_name_or_path"])
    inputs = {**user_inputs(block.code, data, tmp), **({base.name: base} if f'"{base.name}"' in block.code else {})}
    # the same adapter from the repo: the same result (fp32 and its steps, as check_block's for a pipeline)
    pipeline = "diffusers" in code
    with hub_cache(tmp, {repo_id: output_dir}), edit_areas(block.code, code), \
            pipeline_calls(STEPS_OF_A_RUN if pipeline else None, fp32=pipeline):
        got = run_block(block.code, tmp / "pushed", inputs=inputs, name=f"{repo_id} README.md")
    assert _same(got, local), "the pushed card's snippet makes another result than the local card's"


def _same(a: object, b: object) -> bool:
    """Equal results: the same text, or arrays of one shape within one uint8 step (a video through another encode)."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.shape == b.shape and int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max()) <= 1


def doc_runs(root: Path) -> dict[tuple[str, int], str]:
    """The docs' python blocks that run, (file, index among its python blocks) -> the demo config whose run stands in
    for the reader's (its model for every Hub id the block names, its output folder for the block's ``./out-*``), as
    each block's ``<!-- snippet: runs after: CONFIG -->`` marker says; every other block carries a ``<!-- snippet: not
    run: REASON -->`` marker (tests/test_doc_snippets.py checks both)."""
    return {key: block.runs_after for key, block in doc_blocks(root).items() if block.runs_after is not None}

#: the call arguments that the GPU stand-in takes from the run's own card: the published sizes and step counts a
#: guide shows (1328 x 1328, 81 frames of 720 x 1280, 50 steps) are hours on a CPU for the tiny model
SIZES = ("height", "width", "num_frames", "frames", "num_inference_steps")
_HUB_ID = re.compile(r"""["']([A-Za-z0-9][\w.-]*/[\w.-]+)["']""")


def doc_blocks(root: Path) -> dict[tuple[str, int], Block]:
    """Every python block of the README and the docs pages, by (file relative to ``root``, index in the file)."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return {(page.relative_to(root).as_posix(), b.index): b for page in pages for b in python_blocks(page.read_text())}


@contextlib.contextmanager
def card_sizes(card: str) -> Iterator[None]:
    """The GPU stand-in: every diffusers pipeline call takes :data:`SIZES` from the run's card snippet (``card``),
    whatever the text passes (the rest of the call is the text's)."""
    with pipeline_calls({k: int(v) for k, v in re.findall(rf"\b({'|'.join(SIZES)})=(\d+)", card)}):
        yield


#: the Edit pipelines' modules (diffusers 0.42), each with its own ``calculate_dimensions``, and the area both encode the
#: image to edit at whatever the call's size (QwenImageEditPipeline's literal, QwenImageEditPlusPipeline's
#: ``VAE_IMAGE_SIZE``; Edit's text encoder sees that image too, and both default the output size to it)
EDIT_MODULES = {"QwenImageEditPipeline": "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit",
                "QwenImageEditPlusPipeline": "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus"}
EDIT_AREA = 1024 * 1024


@contextlib.contextmanager
def edit_areas(code: str, card: str) -> Iterator[None]:
    """The GPU stand-in for the Edit pipelines ``code`` names: the 1024 x 1024 area they resize the image to edit to
    (the VAE's input, :data:`EDIT_AREA`; minutes for the tiny VAE on a CPU) is the run's card's ``height`` x ``width``
    instead, the aspect and the rounding to 32 kept; the rest of each call is the text's (Edit-Plus's text encoder
    still sees each image at its 384 x 384 ``CONDITION_IMAGE_SIZE``, as training's cache did). Nothing for other code."""
    import importlib

    sizes = dict(re.findall(r"\b(height|width)=(\d+)", card))
    area = int(sizes.get("height", 0)) * int(sizes.get("width", 0))
    patch = pytest.MonkeyPatch()
    for cls, name in EDIT_MODULES.items():
        if re.search(rf"\b{cls}\b", code):
            assert area, "the card names no height and width to stand in for the Edit pipelines' 1024 x 1024 area"
            module = importlib.import_module(name)
            original = module.calculate_dimensions

            def scaled(target_area, ratio, _original=original):
                return _original(area if target_area == EDIT_AREA else target_area, ratio)

            patch.setattr(module, "calculate_dimensions", scaled)
    try:
        yield
    finally:
        patch.undo()


def check_docs(config: str, output_dir: Path, model: Path, data: Path, tmp: Path, root: Path) -> list[str]:
    """Run the docs' python blocks :func:`doc_runs` gives ``config`` (the run of that demo config wrote
    ``output_dir`` from ``model`` on ``data``), as written: Hub ids served by ``model`` (:func:`hub_cache`), the block's
    ``./out-*`` folder the run's output, the sizes the card's (:func:`card_sizes`); the adapter must change the
    result (:func:`check_block`). A block that runs what an earlier one ran (:func:`what_runs`: the README's and the
    Sana guide's differ in a comment and a step count the stand-in replaces) is not run again. Returns the blocks
    checked, as ``file:index``."""
    blocks, ran, runs = doc_blocks(root), [], set()
    card = card_block(output_dir)
    for (page, index), demo in doc_runs(root).items():
        if demo != config:
            continue
        code = blocks[page, index].code
        if what_runs(code, card) in runs:
            ran.append(f"{page}:{index}")
            continue
        runs.add(what_runs(code, card))
        ids = {i for i in _HUB_ID.findall(code) if not i.startswith((".", "/"))}
        folders = {name: output_dir for name in re.findall(r"""["']\./(out[\w.-]*)["']""", code)}
        revisions = tuple(re.findall(r"""revision=["']([^"']+)["']""", code))
        with hub_cache(tmp, {i: model for i in ids}, revisions), card_sizes(card), edit_areas(code, card):
            check_block(code, tmp / f"{page}-{index}".replace("/", "_"), inputs={**user_inputs(code, data, tmp), **folders},
                        name=f"{page} block {index}")
        ran.append(f"{page}:{index}")
    return ran


def what_runs(code: str, card: str) -> str:
    """What ``code`` runs under :func:`check_docs`' stand-ins: its syntax tree (no comments), without the call
    arguments they replace in a pipeline block (the steps, and the :data:`SIZES` the card ``card`` gives)."""
    replaced = set()
    if "diffusers" in code:
        replaced = {"num_inference_steps", *re.findall(rf"\b({'|'.join(SIZES)})=\d+", card)}
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            node.keywords = [k for k in node.keywords if k.arg not in replaced]
    return ast.dump(tree)
