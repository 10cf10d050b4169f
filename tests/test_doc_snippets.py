"""Every python block of the README and the docs pages runs as written, or says why not: a block marked
``<!-- snippet: runs after: CONFIG -->`` runs after that demo config's run in tests/conformance (Hub ids served by the
demo model, the adapter changing the result; tests/support/snippets.py ``doc_runs``), every other block carries a
``<!-- snippet: not run: REASON -->`` marker. A new block that is neither fails here; a family's guide says which of
its blocks run on which of its demos, so no shared list names it."""

from __future__ import annotations

from pathlib import Path

import yaml
from helpers import ROOT
from snippets import Block, doc_blocks, doc_runs, python_blocks, what_runs


def test_every_docs_python_block_is_run_or_exempt_with_a_reason():
    blocks = doc_blocks(ROOT)
    neither = [f"{page} block {i}" for (page, i), b in blocks.items() if not b.runs_after and not b.exempt]
    assert not neither, (f"python blocks that neither `<!-- snippet: runs after: CONFIG -->` runs nor "
                         f"`<!-- snippet: not run: REASON -->` exempts: {neither}")
    assert doc_runs(ROOT), "no docs block runs"
    assert all(len(b.exempt) > 20 for b in blocks.values() if b.exempt), "an exemption says why"


def test_each_run_block_has_an_audited_demo_run_whose_family_it_loads():
    """The demo config of each run block is one tests/conformance trains (a registry entry's demo config), and the
    block uses that family's pipeline or model class."""
    from dit_lora.registry import entries, get_spec

    trained = {config for entry in entries() for config in entry.demo_configs}
    for (page, index), config in doc_runs(ROOT).items():
        assert config in trained, f"{page} block {index} runs after {config}, which is no registry entry's demo config"
        family = yaml.safe_load((ROOT / "recipes" / "configs" / config).read_text())["family"]
        info = get_spec(family).info
        code = doc_blocks(ROOT)[page, index].code
        names = {*info.pipeline_classes, getattr(getattr(get_spec(family).adapter, "arch", None), "model_class", "")}
        assert any(name and name in code for name in names), (page, index, family)


def test_markers_are_read_only_from_the_line_above_the_block():
    text = ("<!-- snippet: not run: a fragment of the card's snippet, no pipe -->\n```python\npipe.x()\n```\n\n"
            "words\n\n```python\nprint(1)\n```\n<!-- snippet: not run: below, not above -->\n"
            "<!-- snippet: runs after: sana/demo.yaml -->\n\n```python\npipe.y()\n```\n")
    assert python_blocks(text) == [Block("pipe.x()\n", 0, "a fragment of the card's snippet, no pipe"),
                                   Block("print(1)\n", 1, None),
                                   Block("pipe.y()\n", 2, None, "sana/demo.yaml")]
    assert Path(ROOT / "README.md").is_file()


def test_a_docs_block_that_runs_what_another_ran_is_run_once():
    """check_docs runs the README's Sana block and the Sana guide's once: they differ in a comment and the step count
    that every run replaces (snippets.AS_WRITTEN_STEPS); a block that differs in anything else runs on its own."""
    blocks, card = doc_blocks(ROOT), 'pipe(prompt, height=64, width=64, num_inference_steps=8)'
    readme, guide = blocks["README.md", 0].code, blocks["docs/guides/sana.md", 0].code
    assert readme != guide and what_runs(readme, card) == what_runs(guide, card)
    other_prompt = readme.replace('"a corgi on a beach at sunset"', '"a cat"')
    other_size = readme.replace("generator=", "height=32, generator=")
    assert other_prompt != readme and other_size != readme
    assert what_runs(other_prompt, card) != what_runs(readme, card)
    assert what_runs(other_size, "pipe(prompt, num_inference_steps=8)") != what_runs(readme, card)  # not the card's
    assert what_runs(other_size, card) == what_runs(readme, card)  # the card's height replaces it
