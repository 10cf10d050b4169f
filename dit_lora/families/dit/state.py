"""``DiTRun``: what a DiT run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dit_lora.families.dit.embedding import DEFAULT_CLASS_DROPOUT
from dit_lora.kit.run_state import EpsilonRun


@dataclass
class DiTRun(EpsilonRun):
    """The per-run state of a DiT run (mutable: loading fills what the checkpoint says, the data stage the labels):
    the kit's epsilon-prediction state and DiT's class tables."""

    #: the probability a class label is dropped to the null class for guidance (the checkpoint's own)
    class_dropout_prob: float = DEFAULT_CLASS_DROPOUT
    #: the class count of the model as loaded (before ``--num_classes`` resizes it)
    base_num_classes: int | None = None
    #: the null class's id: the class rows of the table (after ``inspect_samples``), the row guidance feeds
    null_class: int | None = None
    #: the dataset's class names, sorted (part of the cache key); None until the samples are inspected
    classes: list[str] | None = None
    #: ``{class name: class id}``; None until the samples are inspected
    label2id: dict[str, int] | None = None
    #: whether the class names are the base model's own (ImageNet wnids, id2label synonyms), keeping its rows
    kept_pretrained_names: bool = False

    #: what sets :attr:`null_class` (:meth:`required`'s refusal of a state built by hand without it)
    loaded_by: ClassVar[str] = "DiTModel.build_components sets it (the class rows of the model's class table)"

    def null_id(self) -> int:
        """:attr:`null_class`, which loading and ``inspect_samples`` set (:meth:`required`: refused in words)."""
        return self.required(self.null_class, "null_class")


#: ``comps.state``, an empty :class:`DiTRun` put there first for components built by hand (tests, benchmarks).
run_state = DiTRun.of
