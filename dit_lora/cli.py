"""The ``dit-lora`` console script: ``dit-lora doctor`` and ``dit-lora push``.

Heavy imports (torch, huggingface_hub) happen inside the subcommands so ``dit-lora --help``
stays instant and works in a broken environment (which is when people run ``doctor``).
"""

from __future__ import annotations

import argparse
import sys

from dit_lora.errors import UserError, run_cli


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dit-lora",
        description="LoRA fine-tuning for diffusion transformers: environment checks and Hub upload.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    doctor = sub.add_parser("doctor", help="check installed versions, device and known-bad combinations")
    doctor.add_argument("--no-import", action="store_true",
                        help="only compare versions; do not import the packages (faster)")

    push = sub.add_parser("push", help="upload a finished run's adapter, card and samples to the Hub")
    push.add_argument("output_dir", help="the --output_dir of a finished training run")
    push.add_argument("--hub_model_id", required=True, help="target model repo, e.g. username/my-sana-lora")
    push.add_argument("--private", action="store_true", help="create the repo as private (if it does not exist)")
    push.add_argument("--commit_message", default=None, help="commit message for the upload")
    return parser


def _doctor(args: argparse.Namespace) -> int:
    from dit_lora import doctor

    checks = doctor.run_checks(import_check=not args.no_import)
    print(doctor.format_table(checks))
    blocks = [c for c in checks if c.status == doctor.BLOCK]
    warns = [c for c in checks if c.status == doctor.WARN]
    print()
    if blocks:
        print(f"{len(blocks)} blocking problem(s), {len(warns)} warning(s): fix the BLOCK lines before training.")
        return 1
    print(f"no blocking problems ({len(warns)} warning(s)).")
    return 0


def _push(args: argparse.Namespace) -> int:
    from pathlib import Path

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


def _main(argv: list[str] | None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return _doctor(args)
    if args.command == "push":
        return _push(args)
    parser.print_help(sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``dit-lora`` console script (exits with the command's status)."""
    run_cli(lambda: _main(argv))


if __name__ == "__main__":
    main()
