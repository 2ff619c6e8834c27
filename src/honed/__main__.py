import sys

from honed.cli import main

sys.exit(main())
