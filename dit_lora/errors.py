"""User-facing errors: one paragraph that names the problem, the file or flag, and the fix."""

from __future__ import annotations

import sys
import textwrap
from typing import Callable


class UserError(Exception):
    """A problem with the user's config, data or environment.

    The message is shown as-is (no traceback), so it must name what is wrong, where
    (file or flag), and how to fix it.
    """

    exit_code = 2


def format_error(err: BaseException) -> str:
    """Render an error as one wrapped paragraph prefixed with ``error:``."""
    text = " ".join(str(err).split())
    return textwrap.fill(f"error: {text}", width=100)


def run_cli(main: Callable[[], int | None]) -> None:
    """Run ``main`` and turn a :class:`UserError` into a short message and exit code 2."""
    try:
        code = main()
    except UserError as err:
        print(format_error(err), file=sys.stderr, flush=True)
        sys.exit(err.exit_code)
    sys.exit(code or 0)
