"""config/docs.py: the options tables are generated per owner (common, then one per family); dit_lora/commands/docsite.py puts
them in docs/reference/options.md."""

from __future__ import annotations

from dit_lora.config.docs import END, HEADER, START, family_tables, options_markdown, rewrite_table


def test_common_table_first_then_one_table_per_family_class():
    text = options_markdown()
    assert text.startswith("Common to every family:\n\n" + HEADER)
    headings = [heading for heading, _ in family_tables()]
    assert headings[0] == "Options of `--family sana`"
    # the video LLMs: one class, listed once
    assert sum(h.startswith("Options of `--family llava_next_video` or `--family qwen2_5_vl`") for h in headings) == 1
    common, _, families = text.partition("\nOptions of ")
    assert "`--rank`" in common and "`--num_classes`" not in common and "`--num_classes`" in families


def test_a_family_built_on_another_lists_only_what_it_adds():
    tables = dict(family_tables())
    i2v = tables["Options of `--family cogvideox_i2v` (and every option of `--family cogvideox`)"]
    assert "`--first_frame_noise`" in i2v and "`--loss_weight_cap`" not in i2v
    assert "`--loss_weight_cap`" in tables["Options of `--family cogvideox`"]


def test_rewrite_adds_markers_once_then_replaces_between_them(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nintro\n\n{HEADER}\n|---|---|---|\n| `--old` | `1` | gone |\n\nafter\n")
    rewrite_table(readme)
    first = readme.read_text()
    assert first.count(START) == 1 and first.count(END) == 1 and "--old" not in first
    assert options_markdown() in first and first.endswith("after\n") and first.startswith("# x\n\nintro\n")
    rewrite_table(readme)
    assert readme.read_text() == first
