"""`python -m honed`: the same command line as `honed`; in one of several learner processes
(`WORLD_SIZE` above 1: `honed train --nproc`, torchrun), run so that the process leaves
without Python's shutdown (`honed.distributed.launch.run_learner`)."""

import os
import sys

from honed.cli import main

if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    from honed.distributed.launch import run_learner

    run_learner(main)
sys.exit(main())
