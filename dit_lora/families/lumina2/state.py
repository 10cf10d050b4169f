"""``Lumina2Run``: what a Lumina 2 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.kit.run_state import FlowRun


@dataclass
class Lumina2Run(FlowRun):
    """The per-run state of a Lumina 2 run: the flow family's (``text``: ``--max_sequence_length`` and the system
    prompt) and the trimmed caption length."""

    #: the caption tokens any cached caption uses (``--trim_text_padding``): every batch is cut to them; None: all
    text_tokens: int | None = None
    #: the micro-batch's caption token counts, known on the host, while its loss is computed: what the transformer's
    #: RoPE embedder is given instead of reading its mask back (``model.give_host_counts``); None otherwise
    caption_counts: list[int] | None = None


#: ``comps.state``, an empty :class:`Lumina2Run` put there first for components built by hand (tests)
run_state = Lumina2Run.of
#: the run's flow tables, built on a device once when the components were built by hand (not per step)
tables = Lumina2Run.tables
