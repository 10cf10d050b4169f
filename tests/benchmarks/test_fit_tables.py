"""benchmarks/plan/fit_tables.py --update-guides: a guide's fit table gets fresh rows for the checkpoints it lists,
in its order, at the card sizes its own header names, and nothing else in the file changes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("fit_tables", ROOT / "benchmarks" / "plan" / "fit_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_update_guides_rewrites_each_listed_row_and_keeps_the_rest(tmp_path):
    fit = _module()
    guide = tmp_path / "dit.md"
    before = (
        "# DiT\n\nprose stays\n\n"
        f"{fit.HEADER} 16 GB | 80 GB |\n|---|---:|---:|---:|---|---|\n"
        "| `facebook/DiT-XL-2-256` | stale | stale | stale | stale | stale |\n"
        "\nafter the table\n"
    )
    guide.write_text(before)
    (tmp_path / "other.md").write_text("no table here\n")
    assert fit.update_guides(tmp_path) == [str(guide)]
    lines = guide.read_text().splitlines()
    row = next(line for line in lines if line.startswith("| `facebook/DiT-XL-2-256`"))
    # two cells, the header's 16 GB and 80 GB, each with the host memory its configuration needs
    assert "stale" not in row and row.count("|") == 7 and re.search(r"\| fits \(host \d+ GiB\) \| fits \(host \d+ GiB\) \|$", row)
    assert lines[:4] == before.splitlines()[:4] and lines[-1] == "after the table"
    assert fit.update_guides(tmp_path) == []  # a second pass changes nothing


def test_a_video_llm_table_without_phases_is_rewritten_too(tmp_path):
    """The video LLMs' tables have no caching column (SHORT_HEADER); their rows are regenerated like the others'."""
    fit = _module()
    guide = tmp_path / "video-llms.md"
    guide.write_text(
        f"{fit.SHORT_HEADER} 16 GB |\n|---|---:|---|\n| `OpenGVLab/InternVL3_5-1B-HF` (a note) | stale | stale |\n"
    )
    assert fit.update_guides(tmp_path) == [str(guide)]
    row = guide.read_text().splitlines()[2]  # the guide's note beside the id stays
    assert row.startswith("| `OpenGVLab/InternVL3_5-1B-HF` (a note) | **") and re.search(r" GiB\*\* \| fits \(host \d+ GiB\) \|$", row), row


def test_a_cell_says_the_ladders_words_and_keeps_the_margin():
    """A cell is `dit-lora plan`'s answer: *fits* with the margin kept, *fits, narrowly* inside it (with the flags
    that keep it), else flags whose prediction leaves the margin."""
    from dit_lora.plan import ladder
    from dit_lora.plan.estimate import Plan
    from dit_lora.plan.tracing import StepTrace

    fit = _module()
    gib = 2**30
    plan = Plan(model="m", family="sana", catalogue_entry=None, device="cuda", num_processes=1, train_batch_size=1,
                gradient_accumulation_steps=1, depth=2, weights={"model": 6 * gib}, trained_component="model",
                trainable_params=1, optimizer_bytes=0, snapshot_bytes=0, ddp_bytes=0, cache_phase_bytes=None,
                encoders_in_training=False, process_bytes=0, checkpointing=False,
                steps=[StepTrace("b", False, 4 * gib, 1), StepTrace("b", True, gib, 2)],  # 10 GiB, 7 with checkpointing
                host_stored={"model": 6 * gib})  # its files, mapped while loading
    # each cell says the host memory of the configuration it names: the 6 GiB of files mapped and the process's 2
    assert fit.cell(plan, 12)[0] == "fits (host 8 GiB)"  # 10 of 12: 16.7% left
    text, data = fit.cell(plan, 11)  # 9% left: inside the plan's error
    assert text == ("fits, narrowly (host 8 GiB); `--gradient_checkpointing true` (7.0 GiB; host 8 GiB) keeps the "
                    "margin") and data["narrowly"]
    text, data = fit.cell(plan, 9)
    assert text == "`--gradient_checkpointing true` (7.0 GiB; host 8 GiB)" and data["peak_memory_bytes"] <= 9 * gib * (
        1 - ladder.GPU_ERROR)
