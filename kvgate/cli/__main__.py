"""`python -m kvgate.cli ARGS`: the `kvgate` command without its console script."""

import sys

from kvgate.cli import main

sys.exit(main())
