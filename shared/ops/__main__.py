"""``python -m shared.ops``: the operators' commands (``shared.entrypoints.cli.ops``)."""

import sys

from shared.entrypoints.cli.ops import main

if __name__ == "__main__":
    sys.exit(main())
