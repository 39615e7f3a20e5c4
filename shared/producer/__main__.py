"""``python -m shared.producer``: the producer's command line
(``shared.entrypoints.cli.producer``)."""

import sys

from shared.entrypoints.cli.producer import main

if __name__ == "__main__":
    sys.exit(main())
