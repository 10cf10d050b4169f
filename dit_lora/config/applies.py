"""Options that only some families read, refused when given to another.

A common option declares the families it means something to with ``opt(..., applies=Applies(...))``
(:class:`~.schema.Applies`): the capabilities those families declare (``contract/capabilities.py``, e.g.
``VideoFrames``). A family that does not read an option would ignore it and record it in ``train_summary.json``
as if used; so an option set explicitly (a flag or a YAML key: ``cfg.explicit_options``) for such a family ends
the run before anything loads, in one paragraph. Defaults are never refused. A new option tagged in the schema,
or a new family declaring its capabilities, needs nothing here.
"""

from __future__ import annotations

from collections.abc import Callable

from dit_lora.config import families
from dit_lora.config.schema import Applies, config_fields
from dit_lora.core.errors import UserError


def declared(family: str) -> frozenset[str]:
    """The names of the capability protocols the family ``family`` declares (the protocols of the optional
    components its spec fills), as the registry tells them (:mod:`.families`)."""
    return families.source().capabilities(family)


def applies_to(tag: Applies, family: str) -> bool:
    """Whether the family ``family`` reads the options tagged ``tag``: it declares one of ``tag.any_of`` and none
    of ``tag.none_of``."""
    names = declared(family)
    return bool(names & set(tag.any_of)) and not names & set(tag.none_of)


def families_for(tag: Applies) -> list[str]:
    """The registered family names that read the options tagged ``tag`` (builds each family's spec: messages only)."""
    return [name for name in families.source().available() if applies_to(tag, name)]


def what_it_trains(family: str) -> str:
    """``trains images``, ``trains videos`` or ``is a video LLM``: what a message says of the refusing family."""
    names = declared(family)
    if "VideoFrames" in names:
        return "trains videos"
    if "VideoQA" in names:
        return "is a video LLM (it answers questions about clips)"
    return "trains images"


def tagged_options() -> dict[str, Applies]:
    """Every common option that only some families read, with its tag, in declaration order."""
    return {f.name: f.metadata["applies"] for f in config_fields() if f.metadata.get("applies") is not None}


def refusal(name: str, tag: Applies, family: str, given: str, chosen_by: str = "--family") -> str:
    """The one paragraph for option ``name`` (tagged ``tag``) given as ``given`` (``--name`` or ``name: in
    run.yaml``) to ``family``, which does not read it; ``chosen_by`` says what chose the family."""
    holders = families_for(tag)
    where = f"--{name}" if given.startswith("--") else given
    fix = f"remove --{name}" if given.startswith("--") else f"remove `{name}` from {given.split(' in ', 1)[-1]}"
    return (
        f"{where} is an option of {tag.kind} ({', '.join(holders) or 'none registered'}); this run trains "
        f"`{family}` ({chosen_by}), which {what_it_trains(family)} and never reads it, so it would be "
        f"ignored. To train one of those families, set --family; otherwise {fix}"
        f"{f' ({tag.instead})' if tag.instead else ''}."
    )


def check_applies(
    family: str,
    explicit: frozenset[str] | None,
    given: Callable[[str], str] | None = None,
    chosen_by: str = "--family",
) -> None:
    """Refuse (one paragraph) an explicitly set option (``explicit``: the run's ``cfg.explicit``) that ``family``
    does not read. ``given(name)`` says how it was set (``--name``, or ``name`` in a YAML path; default ``--name``)."""
    explicit = explicit or frozenset()
    tagged = [(name, tag) for name, tag in tagged_options().items() if name in explicit]
    if not tagged:
        return
    for name, tag in tagged:
        if not applies_to(tag, family):
            raise UserError(refusal(name, tag, family, given(name) if given else f"--{name}", chosen_by))
