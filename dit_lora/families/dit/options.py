"""Class-conditional DiT's own options (``--family dit``)."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import POSITIVE, FamilyOptions, opt


@dataclass(frozen=True)
class DiTOptions(FamilyOptions):
    """Options only DiT reads."""

    TITLE = "dit options (--family dit)"

    num_classes: int | None = opt(
        None,
        "DiT: number of classes to train. If it differs from the model's class-embedding size, the label embedding "
        "is resized (keeping the null class used for guidance) and trained at --backbone_learning_rate.",
        section="dit",
        resume="fixed",
        valid=POSITIVE,
    )
