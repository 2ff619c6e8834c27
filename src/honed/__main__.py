"""`python -m honed`: the same command line as `honed`."""

import sys

from honed.cli import main

sys.exit(main())
