"""The ``dit-lora`` console script: ``train``, ``doctor``, ``models``, ``plan``, ``push``, ``export``, ``check-data``,
``caption``, ``launch``.

Heavy imports (torch, huggingface_hub) happen inside the subcommands so ``dit-lora --help``
stays instant and works in a broken environment (which is when people run ``doctor``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from dit_lora.catalogue import entries
from dit_lora.catalogue.table import as_json, format_table
from dit_lora.commands import caption, doctor
from dit_lora.commands.doctor_versions import BLOCK, WARN
from dit_lora.commands.launch import main as launch
from dit_lora.commands.recipe import check_model, run_recipe
from dit_lora.config import TrainConfig, load_yaml, owners
from dit_lora.config.applies import check_applies
from dit_lora.config.command_line import add_config_flag
from dit_lora.config.data_kind import video_llm_data_message
from dit_lora.config.dataset_config import (
    SOURCE_KEYS,
    check_data_sets,
    refuse_two_sources,
    source_by_level,
    with_data_sets,
)
from dit_lora.config.schema import ModelOptions, config_fields
from dit_lora.config.values import coerce, unknown_options_message
from dit_lora.core import quiet
from dit_lora.core.errors import UserError, run_cli
from dit_lora.core.fileio import check_writable
from dit_lora.output.export import export_run, is_ema_file, written_by_export
from dit_lora.registry import available, canonical_name, recipe_script
from dit_lora.setup.family_inference import family_for_model
from dit_lora.training import signals


def _build_parser() -> argparse.ArgumentParser:
    """The ``dit-lora`` parser: one subcommand per stage below, in the order ``--help`` lists them."""
    parser = argparse.ArgumentParser(
        prog="dit-lora",
        description="LoRA fine-tuning for diffusion transformers: environment checks, data checks and Hub upload.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_doctor_and_models(sub)
    _add_plan(sub)
    _add_train_and_launch(sub)
    _add_push_and_export(sub)
    _add_check_data(sub)
    caption.add_parser(sub)
    return parser


def _add_doctor_and_models(sub) -> None:
    """The ``doctor`` and ``models`` subcommands."""
    doctor = sub.add_parser("doctor", help="check installed versions, device and known-bad combinations")
    doctor.add_argument(
        "--no-import", action="store_true", help="only compare versions; do not import the packages (faster)"
    )
    doctor.add_argument(
        "--model",
        default=None,
        metavar="PATH_OR_ID",
        help="also check what this model needs (e.g. the packages its tokenizer files require)",
    )

    models = sub.add_parser("models", help="list the catalogued checkpoints and the defaults each one gets")
    models.add_argument("--family", default=None, help="only this recipe family (e.g. sana, cogvideox)")
    models.add_argument("--json", action="store_true", help="every entry in full (configs and sources) as JSON")


def _add_plan(sub) -> None:
    """The ``plan`` subcommand and its own flags (it takes every recipe option besides)."""
    # allow_abbrev=False on the subcommands that take run options, as `train` parses them: an abbreviation
    # (`--video_fold`) is refused and another trainer's name (`--dataset`) gets its hint, never a guess
    plan = sub.add_parser(
        "plan",
        allow_abbrev=False,
        help="predict a run's peak memory and FLOPs per step, without loading weights",
        usage="dit-lora plan [MODEL] [--gpu_memory SIZE] [recipe options ...]",
        description="Predict the peak memory per process and the FLOPs of one training step of a configuration "
        "(meta-device model, fake tensors). MODEL (a Hub id or a folder) is short for "
        "--pretrained_model_name_or_path. Takes any recipe option (--config, --resolution, --train_batch_size, "
        "...); the family is read from the model unless --family is given.",
    )
    plan.add_argument(
        "--gpu_memory",
        default=None,
        metavar="SIZE",
        help="say what fits on this much memory per GPU, e.g. 24GB (default: this machine's device), keeping the "
        "plan's worst measured GPU error (15%%) of it free; when the run does not fit that, the ladder of levers "
        "(checkpointing, fp8_scaled, activation offloading, block swap, FSDP2, nf4, fewer tokens) and the flags of "
        "the fastest configuration that fits",
    )
    plan.add_argument(
        "--num_gpus",
        "--num_processes",
        dest="num_processes",
        metavar="N",
        type=int,
        default=1,
        help="GPUs (processes) of the run; --num_processes is the same option. Several: DDP adds its buckets, and "
        "the ladder tries FSDP2 where DDP does not fit",
    )
    plan.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="where the run will train: cuda (default) or cpu (adds this Python process's own memory)",
    )
    plan.add_argument(
        "--json", action="store_true", help="the prediction as JSON (peak_memory_bytes and parts; `ladder`: the rungs)"
    )


def _add_train_and_launch(sub) -> None:
    """The ``train`` and ``launch`` subcommands: their options are parsed later (the recipe's, accelerate's)."""
    sub.add_parser(
        "train",
        add_help=False,
        help="train a LoRA: `dit-lora train --config run.yaml [options]` (every recipe option; the family "
        "from --family, the config's `family:`, else the model's; `dit-lora train --family NAME --help` lists "
        "that family's). "
        "Several processes: `dit-lora launch [launch options] -m dit_lora train ...`",
    )
    sub.add_parser(
        "launch",
        add_help=False,
        help="`accelerate launch` keeping exit codes and signals: `dit-lora launch [accelerate launch "
        "options] recipes/<family>_lora.py [recipe options]` (SIGTERM/Ctrl-C save a checkpoint; the "
        "recipe's exit code)",
    )


def _add_push_and_export(sub) -> None:
    """The ``push`` and ``export`` subcommands: both act on a finished run's output folder."""
    push = sub.add_parser(
        "push",
        help="upload a finished run's adapter, card and samples to the Hub",
        description="Upload a finished run to a Hub model repo (created if it does not exist): its adapter files, "
        "the model card written for that repo (its snippet loads the adapter from the repo, never a path of this "
        "machine), train_summary.json, the loss curve, the samples and the image the card conditions on; nothing "
        "else of the folder. Refused before any upload when an adapter holds a NaN or Inf. The token comes from "
        "`hf auth login` or HF_TOKEN and is never printed. What `--push_to_hub` does at the end of a run, for a run that finished without it.",
    )
    push.add_argument("output_dir", help="the --output_dir of a finished training run")
    push.add_argument("--hub_model_id", required=True, help="target model repo, e.g. username/my-sana-lora")
    push.add_argument(
        "--private",
        "--hub_private",  # training's name of it (--hub_private with --push_to_hub)
        dest="private",
        action="store_true",
        help="create the repo as private (if it does not exist); --hub_private, training's spelling, is the same",
    )
    push.add_argument("--commit_message", default=None, help="commit message for the upload")

    export = sub.add_parser(
        "export",
        help="write a finished run's adapter in another consumer's format (e.g. ComfyUI) beside it",
        description="Convert a finished run's adapter into another consumer's key format, written next to it in "
        "OUTPUT_DIR (e.g. `--format comfyui`: <adapter>_comfyui.safetensors). The formats depend on "
        "the run's family, read from its train_summary.json; an unknown --format lists them. A --use_ema run's EMA "
        "adapter is exported too (<export>_ema.safetensors, or inside ema/). A file of the same name that dit-lora "
        "did not write is never replaced.",
    )
    export.add_argument("output_dir", help="the --output_dir of a finished training run")
    export.add_argument(
        "--format",
        required=True,
        dest="export_format",
        metavar="FORMAT",
        help="the format to write, e.g. comfyui (a format the family lacks lists the ones it has)",
    )
    export.add_argument(
        "--family", default=None, help="the run's family, when the folder has no train_summary.json to read it from"
    )


def _add_check_data(sub) -> None:
    """The ``check-data`` subcommand: a recipe config and the recipes' data options."""
    check = sub.add_parser(
        "check-data",
        allow_abbrev=False,
        help="decode every training sample (and its cached latents) and report problems; exit 1 if any blocks",
        description="Decode every sample, run the training preprocessing, and check pixels, captions and cached "
        "latents/embeddings. Prints one row per problem; exits 1 if anything blocks, 0 otherwise.",
    )
    check.add_argument("--config", default=None, help="a recipe YAML config; flags below override it")
    for name in _check_data_keys():  # the recipes' own options, help texts from the config schema
        add_config_flag(check, name)
    check.add_argument("--all", action="store_true", help="also list the rows without problems")


def _doctor(args: argparse.Namespace) -> int:
    checks = doctor.run_checks(import_check=not args.no_import, model=args.model)
    print(doctor.format_table(checks))
    blocks = [c for c in checks if c.status == BLOCK]
    warns = [c for c in checks if c.status == WARN]
    print()
    if blocks:
        print(f"{len(blocks)} blocking problem(s), {len(warns)} warning(s): fix the BLOCK lines before training.")
        return 1
    print(f"no blocking problems ({len(warns)} warning(s)).")
    return 0


def _push(args: argparse.Namespace) -> int:
    from pathlib import Path

    # here, not at the top: `dit-lora --help` must start without torch (the hub upload loads it)
    from dit_lora.output.hub import push_adapter

    output_dir = Path(args.output_dir)
    if not output_dir.is_dir():
        raise UserError(
            f"OUTPUT_DIR {output_dir} does not exist or is not a directory. Pass the --output_dir of a finished "
            "training run, e.g. `dit-lora push runs/my-lora --hub_model_id username/my-lora`."
        )
    url = push_adapter(output_dir, args.hub_model_id, private=args.private, commit_message=args.commit_message)
    print(url)
    return 0


def _export(args: argparse.Namespace) -> int:
    folder = Path(args.output_dir)
    # an export replaces only files an earlier export wrote (export_target refuses any other): say which it replaced
    earlier = {p.resolve() for p in folder.rglob("*.safetensors") if written_by_export(p)} if folder.is_dir() else set()
    for path in export_run(args.output_dir, args.export_format, family=args.family):
        notes = ["the EMA adapter's"] if is_ema_file(path) else []
        notes += ["replaced the earlier export"] if Path(path).resolve() in earlier else []
        print(f"{path} ({'; '.join(notes)})" if notes else path)
    return 0


#: the schema sections whose options decide what check-data screens (a new data option is a check-data flag
#: without a change here), the model options that pick the family, size and cache namespace, and the families'
#: own data options (the video LLMs' frames per clip and video folder; the video size CogVideoX allows)
_CHECK_DATA_SECTIONS = ("data", "video")
_CHECK_DATA_MODEL_KEYS = ("family", "pretrained_model_name_or_path")
_CHECK_DATA_FAMILY_KEYS = ("num_frames", "video_folder", "dataset_info_name", "allow_untrained_resolution")


def _check_data_keys() -> list[str]:
    """The run options ``dit-lora check-data`` takes as flags: the model ones and every data/video option."""
    data = [f.name for f in config_fields() if f.metadata.get("section") in _CHECK_DATA_SECTIONS]
    return [*_CHECK_DATA_MODEL_KEYS, *data, *_CHECK_DATA_FAMILY_KEYS]


def _check_data_unknown(rest: list[str]) -> UserError:
    """The one paragraph for the check-data arguments it does not take: run options it does not read (training,
    LoRA, ...) are named as such, unknown ones get train's hints (another trainer's name, the closest option)."""
    flags = [a for a in rest if a.startswith("--")]
    if not flags:
        return UserError(
            f"Unexpected argument `{rest[0]}` for dit-lora check-data: every value follows its "
            "--option. Run `dit-lora check-data --help` for every option."
        )
    known = set(owners.all_option_names())
    run_options = [f.split("=")[0] for f in flags if f.split("=")[0][2:] in known]
    unknown = [f for f in flags if f.split("=")[0][2:] not in known]
    parts = []
    if unknown:  # hints against every option: a peer's name maps to its dit-lora option even when not a data one
        text = unknown_options_message(unknown, sorted(known | {"config", "all"}), "on the command line")
        parts.append(
            text.replace(" Run with --help for every valid option.", "").replace(
                " Fix or remove each of them; run with --help for every valid option.", " Fix or remove each of them."
            )
        )
    if run_options:
        it = "it" if len(run_options) == 1 else "them"
        parts.append(
            f"dit-lora check-data does not read {', '.join(run_options)}: it screens the data only (its "
            f"flags are the data and video options, --family and --pretrained_model_name_or_path); drop "
            f"{it}, or pass the run's YAML with --config (it reads what it needs and accepts the rest)."
        )
    return UserError(" ".join(parts) + " `dit-lora check-data --help` lists every option it takes.")


def _how_given(args: argparse.Namespace) -> Callable[[str], str]:
    """How ``check-data`` was given an option, as a refusal names it: its flag, or its key in the --config YAML."""
    return lambda name: f"--{name}" if getattr(args, name, None) is not None else f"`{name}` in {args.config}"


def _check_data(args: argparse.Namespace) -> int:
    from pathlib import Path

    # here, not at the top: `dit-lora --help` must start without torch (the data check loads it)
    from dit_lora.data import held_out, preflight
    from dit_lora.data.cache import default_cache_root

    values = load_yaml(args.config, args.family, "--family" if args.family else None) if args.config else {}
    sources = {  # a data source on the command line takes the place of the --config file's, as `train` reads it
        name
        for name in (*SOURCE_KEYS, "dataset_config")
        if str(getattr(args, name, None) or "").lower() not in ("", "none", "null")
    }
    values, notes = source_by_level(values, sources, args.config) if args.config else (values, [])
    for name in _check_data_keys():
        raw = getattr(args, name)
        if raw is not None:
            values[name] = coerce(name, raw, f"--{name}")
    refuse_two_sources(values, sources, args.config)
    for note in notes:
        print(note, flush=True)
    if "family" not in values and values.get("pretrained_model_name_or_path"):  # as `train` and `plan` decide it
        values["family"] = family_for_model(
            TrainConfig(pretrained_model_name_or_path=values["pretrained_model_name_or_path"]).model
        )
    video_llm = None if "family" in values else video_llm_data_message(values.get("train_data_dir"))
    if video_llm:  # the default family (images) would misread it: "a file, not a folder", "this run trains sana"
        raise UserError(video_llm)
    # a flag of another family than the one checked: one paragraph
    cfg = TrainConfig.for_family(**values, explicit=frozenset(values))
    check_applies(cfg.model.family, cfg.explicit, _how_given(args))
    cfg = with_data_sets(cfg)  # the command's one reading of the dataset config
    check_data_sets(cfg)  # a data folder beside a dataset config, prior preservation's options: as `train` judges

    # here, not at the top: `dit-lora --help` must start without torch (the resolve step loads it)
    from dit_lora.contract import spec as fallback
    from dit_lora.data.cache import cache_namespace
    from dit_lora.data.data_sets import sets_media
    from dit_lora.setup.resolve import resolve

    # With a model: the size and cache namespace the run would use (e.g. DiT's 256 px). The data only is screened:
    # the training options are not judged, and no demo is built.
    check_model(cfg.model)  # a --family of another model than the folder's: one paragraph, as `train` says it
    resolved = resolve(cfg, build_demo=False, validate=False)
    cfg, spec = resolved.config, resolved.spec
    media = sets_media(cfg, spec) or spec.data.data_handler(cfg, spec)
    # The family's own screening, as training runs it (images, clips to their buckets, video-QA conversations).
    rows, samples, note = media.check(media.list_samples(), log=lambda line: print(line, flush=True))
    # what the family says of them (LTX-2: clips without sound)
    for line in fallback.sample_notes(spec, cfg.training, cfg.family_options, samples):
        print(line, flush=True)

    # The cache: exactly the namespace a run would use when the model is known, else every namespace in
    # an explicitly given cache folder (entries are matched to samples by content, so others are ignored).
    if media.cacheable:
        namespace = None
        if cfg.model.pretrained_model_name_or_path and cfg.data.cache_latents:
            namespace = cache_namespace(media.namespace_identity())
        note = "cache: not checked (pass --cache_dir, or --config/--pretrained_model_name_or_path of the run)"
        if cfg.data.cache_dir or namespace is not None:
            root = Path(cfg.data.cache_dir) if cfg.data.cache_dir else default_cache_root()
            # A run would fail writing this cache: say so now, not after the model loads.
            check_writable(root, "--cache_dir", "" if cfg.data.cache_dir else " (It is the default cache folder.)")
            cache_rows, note = _check_cache(media, samples, root, namespace)
            rows += cache_rows

    table = preflight.format_table(rows, show_ok=args.all)
    if table:
        print(table)
    if note:
        print(note)
    print(preflight.summarize(rows, max_bad_samples_fraction=cfg.data.max_bad_samples_fraction))
    # --validation_split: what a run would hold out of these; --validation_data_dir: that folder, checked alike
    held_blocks = held_out.check(media, cfg, samples, log=lambda line: print(line, flush=True), show_ok=args.all)
    if preflight.has_blocking(rows) or held_blocks:
        print("fix or remove the BLOCK rows (training skips those samples and lists them in quarantine.json).")
        return 1
    return 0


def _check_cache(media, samples: list, root: Path, namespace: str | None) -> tuple[list, str]:
    """check-data's cache rows and note: each data set of a dataset config in its own namespace (when the model is
    known), else every sample in ``namespace`` (None: every namespace under ``root``)."""
    from dit_lora.data import preflight
    from dit_lora.data.data_sets import SetsMedia

    if not isinstance(media, SetsMedia) or namespace is None:
        return preflight.check_cache(samples, root, namespace=namespace)
    rows, notes = [], []
    for k, own in enumerate(media.namespaces()):
        part = [s for s in samples if s.data_set == k]
        if part:
            found, note = preflight.check_cache(part, root, namespace=own)
            rows += found
            notes.append(f"`{media.sets[k].name}`: {note}")
    return rows, "\n".join(notes)


def _plan(args: argparse.Namespace, rest: list[str]) -> int:
    import json

    import torch

    # here, not at the top: `dit-lora --help` must start without torch (the memory plan loads it)
    from dit_lora.plan import ladder, make_plan
    from dit_lora.plan.report import device_memory, device_name, format_plan, parse_memory
    from dit_lora.setup.resolve import resolve

    def model_family(model: ModelOptions) -> str:  # no --family and no `family:`: the model's (its options known)
        _plan_demo_exists(model, rest)
        return family_for_model(model)

    def checked(cfg: TrainConfig) -> None:  # a demo named that does not exist yet, then the model as `train` checks it
        _plan_demo_exists(cfg.model, rest)
        check_model(cfg.model)

    rest = _model_argument(rest)
    # Resolved as a run resolves it (the plan judges no training option the run's own start would not: validate
    # off), without building a demo: one named that does not exist yet is a paragraph.
    resolved = resolve(
        rest,
        prog="dit-lora plan",
        needs_data=False,
        infer_family=model_family,
        check=checked,
        build_demo=False,
        validate=False,
    )
    cfg, spec, chosen = resolved.config, resolved.spec, resolved.defaults
    assert chosen is not None  # parsing refuses a run without a model, and a named model's defaults are chosen
    here = args.device == "cpu" or not args.gpu_memory  # --gpu_memory: another card, whose levers are not judged here
    plan = make_plan(
        cfg,
        spec,
        device=args.device,
        num_processes=args.num_processes,
        entry=chosen.entry,
        cache=True,
        levers_here=here,
    )
    card = None
    if args.gpu_memory:
        capacity, card = parse_memory(args.gpu_memory), f"--gpu_memory {args.gpu_memory}"
    elif args.device == "cpu" or torch.cuda.is_available():
        device = torch.device(args.device if args.device == "cpu" else "cuda")
        capacity, card = device_memory(device), device_name(device).removeprefix("this ")
    else:
        capacity = None
    if args.json:
        found = ladder.climb(plan, capacity).as_dict() if capacity is not None else None
        print(json.dumps({**plan.as_dict(), "capacity_bytes": capacity, "ladder": found}, indent=2))
    else:
        print("\n".join(chosen.lines()))
        print(format_plan(plan, capacity, card))
    return 0


def _model_argument(rest: list[str]) -> list[str]:
    """``dit-lora plan MODEL ...``: a first argument that is not an option is the model."""
    if not rest or rest[0].startswith("-"):
        return rest
    if "--pretrained_model_name_or_path" in rest or any(a.startswith("--pretrained_model_name_or_path=") for a in rest):
        raise UserError(
            f"dit-lora plan got the model twice: `{rest[0]}` and --pretrained_model_name_or_path. Give it "
            "once, as the first argument or with the flag."
        )
    return ["--pretrained_model_name_or_path", rest[0], *rest[1:]]


def _plan_demo_exists(options: ModelOptions, argv: list[str]) -> None:
    """A demo config (``demo: true`` in ``options``, the run's ``cfg.model``) names a model folder its recipe builds
    on the first run; say so before the plan looks for configs that are not there yet."""
    from pathlib import Path

    model = options.pretrained_model_name_or_path
    if options.demo and model and not Path(model).exists():
        config = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"), None)
        recipe = recipe_script(options.family) if options.family in available() else "the family's recipe"
        raise UserError(
            f"The demo model `{model}` (--pretrained_model_name_or_path{f' in {config}' if config else ''}) does not "
            f"exist yet: with `demo: true` the recipe builds it on its first run, and `dit-lora plan` reads the "
            f"configs of a model that exists. Run `dit-lora launch {recipe}{f' --config {config}' if config else ''}` "
            "once (it builds the demo), or with the same options, then plan again."
        )


def _main(argv: list[str] | None) -> int:
    quiet.install()  # before any subcommand imports PEFT (and with it bitsandbytes)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:  # the recipes' own parser reads the rest
        signals.current()  # SIGTERM/SIGINT/SIGHUP handled from here on, as in the recipe scripts (recipe.main)
        return run_recipe(None, argv[1:])
    if argv[:1] == ["launch"]:  # accelerate launch's own parser reads the rest: its options, the script, the script's
        return launch(argv[1:])
    parser = _build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "plan":
        return _plan(args, rest)
    if rest and args.command == "check-data":
        raise _check_data_unknown(rest)
    if rest and args.command == "caption":
        raise caption.refuse_extra(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "doctor":
        return _doctor(args)
    if args.command == "push":
        return _push(args)
    if args.command == "export":
        return _export(args)
    if args.command == "check-data":
        return _check_data(args)
    if args.command == "models":
        return _models(args)
    if args.command == "caption":
        return caption.run(args)
    parser.print_help(sys.stderr)
    return 2


def _models(args: argparse.Namespace) -> int:
    if args.family:  # another spelling `--family` accepts (z-image, flux.2) lists its family's checkpoints
        args.family = canonical_name(args.family)
    if args.family and not entries(args.family):
        known = sorted({e.family for e in entries()})
        raise UserError(
            f"No catalogued checkpoint of family `{args.family}` (--family). Families with "
            f"catalogued checkpoints: {', '.join(known)}."
        )
    print(as_json(args.family) if args.json else format_table(args.family))
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``dit-lora`` console script (exits with the command's status)."""
    run_cli(lambda: _main(argv))


if __name__ == "__main__":
    main()
