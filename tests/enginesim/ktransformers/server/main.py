"""`python -m ktransformers.server.main` -> enginesim.ktransformers_cli."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[3])  # directory holding the enginesim package
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from enginesim.ktransformers_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
