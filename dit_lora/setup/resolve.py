"""A run's config resolved once, before any Accelerator or model exists.

:func:`resolve` is the one way from what the user wrote (the command line, a YAML file through ``--config``, or
a :class:`~dit_lora.config.TrainConfig` built in code) to the frozen config a run trains with:

1. parse (``--family``, else the YAML's ``family:``, else the entry point's inference: a recipe script's own
   family, or the model's), with the unknown options, the family's options, applies-to, ranges, combinations of
   options and the data source checked (:func:`dit_lora.config.parse_config`);
2. the entry point's checks of the model before anything is built (``check``: a file as the model folder, a
   --family that trains another pipeline class);
3. the demo model and data, built once on the main process when ``--demo`` asks for them (their configs decide
   the defaults);
4. the catalogue's and the family's generic defaults (:func:`dit_lora.catalogue.defaults.choose_defaults`): the
   values come back, a new frozen config holds them;
5. the family's own checks of the resolved values (``validate_config``), the image buckets and
   ``--blocks_to_swap`` against the model's block count (read from its config, as the memory plan reads it).

``dit-lora train``, the recipe scripts, ``dit-lora plan`` and ``dit-lora check-data`` all go through here;
:func:`dit_lora.training.run.setup` builds the Accelerator once, from the resolved config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dit_lora.catalogue.defaults import ChosenDefaults, choose_defaults, config_reader
from dit_lora.catalogue.entry import lookup
from dit_lora.config import TrainConfig
from dit_lora.config.dataset_config import with_data_sets
from dit_lora.config.parser import parse_config
from dit_lora.config.schema import ModelOptions
from dit_lora.contract.spec import FamilySpec, require
from dit_lora.data import held_out, masks
from dit_lora.data.image_media import check_image_buckets
from dit_lora.modeling import activation_offload, block_swap
from dit_lora.registry import get_spec


@dataclass(frozen=True)
class Resolved:
    """A resolved run: the frozen config, its family spec and what the defaults chose (``defaults.lines()`` is the
    start-of-run block; None when no model was named, e.g. ``dit-lora check-data`` without one)."""

    config: TrainConfig
    spec: FamilySpec  # the family's spec, looked up in the registry
    defaults: ChosenDefaults | None


def resolve(
    args: Sequence[str] | TrainConfig | None = None,
    *,
    prog: str | None = None,
    needs_data: bool = True,
    infer_family: Callable[[ModelOptions], str | tuple[str, str]] | None = None,
    check: Callable[[TrainConfig], None] | None = None,
    build_demo: bool = True,
    validate: bool = True,
) -> Resolved:
    """``args`` (a command line: ``--config run.yaml`` plus flags; or a config built in code) resolved into the
    frozen config of a run; see the module docstring for the steps.

    ``infer_family`` picks the family when neither ``--family`` nor the YAML names one; ``check`` runs on the parsed
    config before anything is built; ``build_demo=False`` (``dit-lora plan``) never builds the demo; ``validate=False``
    (``dit-lora check-data``, which screens data only) skips the family's checks of the training options.
    """
    if isinstance(args, TrainConfig):
        cfg = args
    else:
        cfg = parse_config(args, prog=prog, needs_data=needs_data, infer_family=infer_family)
    if check is not None:
        check(cfg)
    return resolve_config(cfg, build_demo=build_demo, validate=validate)


def resolve_config(cfg: TrainConfig, *, build_demo: bool = True, validate: bool = True) -> Resolved:
    """Steps 3 to 5 of :func:`resolve` for a parsed (or code-built) config: demo, defaults, the family's checks. A
    config built in code has its dataset config read here (the parser read a parsed one: it is read once)."""
    cfg = with_data_sets(cfg)
    spec = get_spec(cfg.model.family)
    if build_demo and cfg.model.demo:
        build_demo_files(cfg, spec)
    defaults = choose_defaults(cfg, spec) if cfg.model.pretrained_model_name_or_path else None
    if defaults is not None:
        assert defaults.config is not None  # choose_defaults always returns the config it chose for
        cfg = defaults.config
    if (
        cfg.performance.blocks_to_swap
    ):  # also for `dit-lora plan`: a count or a base a run refuses is planned for no run
        block_swap.check_config(
            cfg.performance, cfg.model, spec.name, spec.info.block_lists, block_count(cfg.model, spec)
        )
    if validate:
        spec.model.validate_config(cfg)
        check_image_buckets(spec, cfg)  # a bad --aspect_buckets: one paragraph, before anything loads
        masks.check_options(cfg.data, cfg.explicit)  # --unmasked_weight without --masked_loss: one paragraph
        held_out.check_options(cfg.data)  # a --validation_data_dir that does not exist: one paragraph
        activation_offload.check_config(cfg.performance)  # --activation_offloading with --compile: one paragraph
    return Resolved(config=cfg, spec=spec, defaults=defaults)


def block_count(model: ModelOptions, spec: FamilySpec) -> int | None:
    """The model's number of repeated blocks in its longest block list (what ``--blocks_to_swap`` counts), read from
    its config where the memory plan reads it (the most of the plan's ``swap_depth_keys``, one per list, where it
    has them: a model of several lists; else its ``depth_key``); None when the family has no plan or the config
    cannot be read (the swap then counts the blocks once they are loaded)."""
    if spec.plan is None or not model.pretrained_model_name_or_path:
        return None
    read, counts = config_reader(model), []
    for file, key in getattr(spec.plan, "swap_depth_keys", None) or (spec.plan.depth_key,):
        sub, _, name = file.rpartition("/")
        found = read(sub, name)
        value = lookup(found, key) if found is not None else None
        if isinstance(value, int):
            counts.append(value)
    return max(counts) if counts else None


def build_demo_files(cfg: TrainConfig, spec: FamilySpec) -> None:
    """``--demo``: the family's tiny model and generated data, built by the main process while the others wait
    (accelerate's process state, not an Accelerator: the Accelerator is built from the resolved config)."""
    import torch
    from accelerate import PartialState

    # cpu=: as the run's Accelerator asks, so the process group is the one it joins
    state = PartialState(cpu=not torch.cuda.is_available())
    if state.is_main_process:
        require(spec, "demo", "--demo").prepare_demo(cfg)
    state.wait_for_everyone()


__all__ = ["Resolved", "block_count", "build_demo_files", "resolve", "resolve_config"]
