"""``dit-lora plan``: will a configuration fit, and how much compute is a step? Predicted without weights.

:func:`make_plan` takes a resolved :class:`~dit_lora.config.TrainConfig` (the recipe's defaults applied)
and returns a :class:`~.estimate.Plan`; :mod:`.report` turns it into the table, the advice on what fits,
and the recipes' start-of-run gate.
"""

from __future__ import annotations

from dit_lora.catalogue import defaults  # its reader looked up at call time: tests stand in a model's files
from dit_lora.config import TrainConfig
from dit_lora.contract.spec import FamilySpec
from dit_lora.data.aspect import parse_mode
from dit_lora.plan import levers
from dit_lora.plan.estimate import Plan, plan_run
from dit_lora.plan.tracing import StepTrace


def make_plan(
    cfg: TrainConfig,
    spec: FamilySpec,
    *,
    device: str = "cuda",
    num_processes: int = 1,
    entry=None,
    both_settings: bool = True,
    capacity: int | None = None,
    engine: str = "ddp",
    cache: bool = False,
    levers_here: bool = True,
) -> Plan:
    """The plan of ``cfg`` as the family of ``spec`` would train it (``entry``: the matched catalogue entry, if any).

    ``both_settings``: trace with and without activation checkpointing; else the run's own setting, and the other
    as well when the peak exceeds ``capacity`` (see :func:`~.estimate.plan_run`). ``engine``: ``"ddp"`` or
    ``"fsdp2"`` (the trained model sharded over ``num_processes``). ``cache``: reuse and keep the step traces
    (:mod:`.trace_cache`). ``levers_here``: the plan is for this machine's device, so the ladder proposes only the
    quantization levers that run here (:func:`~.levers.only_runnable`); False for another card (``--gpu_memory``).
    """
    plan = plan_run(
        cfg,
        spec,
        defaults.config_reader(cfg.model),
        device=device,
        num_processes=num_processes,
        catalogue_entry=entry.hub_id if entry is not None else None,
        both_settings=both_settings,
        capacity=capacity,
        engine=engine,
        cache=cache,
    )
    plan.fixed_size = not isinstance(parse_mode(cfg.data.aspect_buckets), str)  # a WxH the run crops every image to
    return levers.only_runnable(plan) if levers_here else plan


__all__ = ["Plan", "StepTrace", "make_plan", "plan_run"]
