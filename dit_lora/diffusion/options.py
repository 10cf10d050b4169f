"""Options shared by the diffusion families: the timestep density of flow-matching / logit-normal training.

A family's options inherit the group it uses: Sana the whole :class:`FlowMatchingOptions`; CogVideoX only
:class:`LogitNormalOptions` (its ``--timestep_sampling logit_normal``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.schema import FINITE, POSITIVE, WEIGHTING_SCHEMES, FamilyOptions, opt

@dataclass
class LogitNormalOptions(FamilyOptions):
    """The logit-normal timestep density: its mean and standard deviation."""

    logit_mean: float = opt(0.0, "Mean of the logit-normal timestep density.", section="flow matching", valid=FINITE)
    logit_std: float = opt(
        1.0, "Standard deviation of the logit-normal timestep density.", section="flow matching", valid=POSITIVE
    )


@dataclass
class FlowMatchingOptions(LogitNormalOptions):
    """Flow-matching training: the timestep density / loss weighting scheme (diffusers.training_utils)."""

    weighting_scheme: str = opt(
        "logit_normal",
        "Timestep density / loss weighting from diffusers.training_utils (Sana's native: logit_normal).",
        choices=WEIGHTING_SCHEMES,
        section="flow matching",
    )
    mode_scale: float = opt(1.29, "Scale of the `mode` timestep density.", section="flow matching", valid=FINITE)
