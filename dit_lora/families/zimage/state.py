"""``ZImageRun``: what a Z-Image run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.kit.run_state import FlowRun


@dataclass
class ZImageRun(FlowRun):
    """The per-run state of a Z-Image run (the setup stage fills it in): the flow family's (``text``: the
    ``--max_sequence_length``)."""


#: ``comps.state``, an empty :class:`ZImageRun` put there first for components built by hand (tests)
run_state = ZImageRun.of
#: the run's flow tables, built on a device once when the components were built by hand (not per step)
tables = ZImageRun.tables
