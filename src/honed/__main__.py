"""`python -m honed`: the same command line as `honed`; in one of several learner processes
(`WORLD_SIZE` above 1: `honed train --nproc`, torchrun), run so that the process leaves
without Python's shutdown (`honed.distributed.launch.run_learner`)."""

import os
import sys

# `python -m` puts the working directory first on `sys.path`; honed imports nothing from it
# (docs/security.md, "Imports and hosts"): a `wandb.py` there must not stand in for a missing
# optional dependency. A module a config names is looked for next to that config instead.
if sys.path and not getattr(sys.flags, "safe_path", False) and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from honed.cli import main

if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    from honed.distributed.launch import run_learner

    run_learner(main)
sys.exit(main())
