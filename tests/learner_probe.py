"""One learner process, set up from a config and measured (started by `test_learner_once.py`,
one per rank, with the environment `honed train --nproc N` gives its processes):

    python learner_probe.py start CONFIG OUT      the memory the trainer's set-up took
    python learner_probe.py penalties CONFIG OUT  the KL reward penalties of the groups of the
                                                  step after the run's checkpoint, and how many
                                                  rows this process scored

It writes its findings as JSON to OUT/rank_<RANK>.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from honed.config import load_config
from honed.distributed.launch import run_learner
from honed.models import scoring
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir


def _status(field: str) -> int:
    """A `/proc/self/status` memory field (`VmRSS`, `VmHWM`), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def start(trainer: GRPOTrainer) -> dict:
    """How far the resident memory's high-water mark rose over the set-up (the peak is reset
    first: Linux's `clear_refs` 5), and the bytes of the whole policy's parameters."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    trainer.setup(resume=False)
    model = trainer.policy.model
    return {
        "grew": _status("VmHWM") - before,
        "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "materialised": all(not p.is_meta for p in model.parameters()),
    }


def penalties(trainer: GRPOTrainer) -> dict:
    """The groups of the step after the run's checkpoint and their KL reward penalties; the
    rows this process scored."""
    rows = [0]
    real = scoring.score

    def counted(model, batch, *args, **kwargs):
        rows[0] += len(batch.completion_mask)
        return real(model, batch, *args, **kwargs)

    trainer.setup(resume=True)
    scoring.score = counted  # what frozen_logprobs scores the policy and reference with
    rolled, found, _ = trainer.collect()
    return {
        "items": [r.group.item_key for r in rolled],
        "penalties": found,
        "rows_scored": rows[0],
    }


def main() -> int:
    mode, config, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    torch.set_num_threads(1)
    cfg = load_config(config)
    trainer = GRPOTrainer(cfg, RunDir(cfg.run_dir))
    found = {"start": start, "penalties": penalties}[mode](trainer)
    (out / f"rank_{os.environ.get('RANK', '0')}.json").write_text(json.dumps(found))
    trainer.rollouts.close()
    trainer.learners.close(wait=True)
    return 0


if __name__ == "__main__":
    # as honed's own learner processes leave: without the interpreter's finalization, which
    # gloo's worker threads can abort ("terminate called without an active exception")
    run_learner(main)
