"""``SanaRun``: what a Sana run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.kit.run_state import FlowRun


@dataclass
class SanaRun(FlowRun):
    """The per-run state of a Sana run: the flow family's (``text``: ``--max_sequence_length`` and the complex
    human instruction) and the trimmed caption length."""

    #: the caption tokens any cached caption uses (``--trim_text_padding``): every batch is cut to them; None: all
    text_tokens: int | None = None


#: ``comps.state``, an empty :class:`SanaRun` put there first for components built by hand (tests, benchmarks)
run_state = SanaRun.of
#: the run's flow tables, built on a device once when the components were built by hand (not per step)
tables = SanaRun.tables
