"""``dit-lora caption PATH --model MODEL``: caption images and clips with a video LLM (:mod:`dit_lora.captioning`).

The flags are :class:`~dit_lora.captioning.options.CaptionOptions`' fields, help texts included. torch and the
captioner load only when the command runs, so ``dit-lora --help`` stays instant.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING
from pathlib import Path

from dit_lora.captioning.options import CaptionOptions
from dit_lora.core.errors import UserError

#: the subcommand's description (``dit-lora caption --help``)
DESCRIPTION = (
    "Caption every image and clip of a folder with a video LLM (Qwen2.5-VL, Qwen3-VL, InternVL3.5, LLaVA-NeXT-Video), "
    "or with a video-LLM LoRA trained by dit-lora (--adapter). Writes <name>.txt beside each file (or one "
    "metadata.jsonl), never replacing a caption unless --overwrite; a killed run resumes where it stopped when run "
    "again. Then: `dit-lora check-data --train_data_dir PATH ...` and train. Exits 1 if a file could not be captioned."
)


def add_parser(sub) -> None:
    """The ``caption`` subcommand, one flag per option field."""
    parser = sub.add_parser(
        "caption", allow_abbrev=False, help="caption images and clips with a video LLM", description=DESCRIPTION
    )
    for f in CaptionOptions.flags():
        meta = dict(f.metadata)
        default = None if f.default is MISSING else f.default
        if f.name == "path":
            parser.add_argument("path", type=Path, help=meta["help"])
        elif f.type in ("bool", bool):
            parser.add_argument(f"--{f.name}", action="store_true", help=meta["help"])
        else:
            kind = int if f.type in ("int", int) else str
            extra = {"choices": meta["choices"]} if "choices" in meta else {}
            if f.name == "dry_run":  # `--dry_run` alone: the first 3 files
                extra["nargs"], extra["const"] = "?", 3
            shown = f" (default: {default})" if default not in (None, "", 0) else ""
            parser.add_argument(f"--{f.name}", type=kind, default=default, help=meta["help"] + shown, **extra)


def run(args: argparse.Namespace) -> int:
    """Caption as ``args`` say; print the summary; 1 when a file failed, else 0."""
    from dataclasses import fields

    from dit_lora.captioning.run import NAMED_FAILURES, TOO_LARGE, caption_folder  # torch, the model: on use only
    from dit_lora.captioning.training_file import write_training_file

    values = {f.name: getattr(args, f.name) for f in fields(CaptionOptions) if hasattr(args, f.name)}
    options = CaptionOptions(**values).resolved()
    if options.training_file:
        target, count, missing = write_training_file(options)
        print(
            f"wrote {target}: {count} conversation(s) (each file asked the caption prompt, its caption the answer)"
            + (f"; {len(missing)} file(s) without a caption left out" if missing else ""),
            flush=True,
        )
        print(
            f"Train a captioner on it: dit-lora launch recipes/videollm_lora.py --family FAMILY "
            f"--pretrained_model_name_or_path MODEL --train_data_dir {target} --output_dir OUT; then caption with "
            "--adapter OUT.",
            flush=True,
        )
        return 0
    outcome = caption_folder(options)
    written, failed = len(outcome.written), outcome.failed
    verb = "captioned (not written: --dry_run)" if options.dry_run else "written"
    print(
        f"done: {written} {verb}, {outcome.kept} kept"
        + (f", {len(outcome.resumed)} from the resumed run" if outcome.resumed else "")
        + f", {len(failed)} failed",
        flush=True,
    )
    for key, why in failed[:NAMED_FAILURES]:
        print(f"  failed: {key}: {why}", flush=True)
    if len(failed) > NAMED_FAILURES:
        print(f"  ... and {len(failed) - NAMED_FAILURES} more", flush=True)
    too_large = sum(why == TOO_LARGE for _, why in failed)
    if too_large and not options.dry_run:
        print(
            f"{too_large} file(s) did not fit the device even alone: run the same command again with a lower "
            "--max_pixels or --num_frames (or --quantize_base nf4); it captions only what is left.",
            flush=True,
        )
    if len(failed) > too_large and not options.dry_run:
        print(
            "The other failed files could not be read or prompted: training leaves out or refuses what cannot be "
            "decoded too, so mend or delete them (`dit-lora check-data` names them as training sees them). Then run "
            "the same command again: it captions only those, the others are kept.",
            flush=True,
        )
    return 1 if failed else 0


def refuse_extra(rest: list[str]) -> UserError:
    """An unknown flag of ``dit-lora caption``: one paragraph naming it."""
    return UserError(
        f"dit-lora caption: unknown argument(s) {' '.join(rest)}. `dit-lora caption --help` lists the options."
    )
