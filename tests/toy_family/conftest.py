"""Makes ``toy_family.pixart`` importable by name (its entry names its options class by a dotted path)."""

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.append(TESTS)  # appended: nothing installed or in tests/support is shadowed
