"""honed as the trainer behind Atropos's trajectory API (`distributed.backend: atropos`).

Atropos environments (`atroposlib`'s `BaseEnv`) sample completions from an inference server,
score them and post groups to the trajectory API (`run-api`); a trainer registers there and
pulls batches. This backend is that trainer's side, as a rollout source of honed's GRPO loop:

- before its first batch it registers (`POST /register`): the batch size in sequences
  (`trainer.prompts_per_step` × `trainer.num_generations`), the longest sequence the policy
  takes, `trainer.max_steps`, the step it starts or resumes from, and the run directory with
  `checkpoint.every` as the environments' checkpoint folder and interval, so an environment's
  own state (a `CurriculumScheduler`'s `state_dict`, which is JSON) is saved beside honed's
  checkpoints at the same steps and read back when the run resumes;
- each step it pulls one batch (`GET /batch`, polled until the API has one, at most
  `distributed.batch_timeout_s`) and turns every scored group into a honed `Group`
  (`to_group`), which the trainer then treats as its own: reward normalisation per
  environment (`reward_norm`), group advantages, the loss, checkpoints, metrics and `honed
  view`;
- after each optimizer step, the new weights go to the inference server the environments
  sample from through `distributed.server`'s weight-sync hook (`reload`: SGLang's
  `/update_weights_from_disk`, which `honed serve` and SGLang answer).

A group's log-probs are the environment's `inference_logprobs` (the server's: each token is
importance-weighted against them, as with `backend: server`); without them the learner scores
the tokens itself, and the group trains as on-policy. Atropos does not say which weights
sampled a group, so its staleness is counted from the last push (a lower bound: an
environment may queue up to its `max_batches_offpolicy` batches ahead).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from honed.config import Config
from honed.distributed.shard import reward_stats
from honed.distributed.types import RolledGroup, RolloutRequest
from honed.distributed.weight_sync import WeightSync
from honed.errors import HonedError
from honed.models.batching import build_batch
from honed.models.chat import ChatClient
from honed.models.policy import Policy
from honed.models.scoring import frozen_logprobs
from honed.reach import Endpoint
from honed.types import Group, Segment, Trajectory

MASKED = -100  # Atropos's mask value for tokens that are not trained on
POLL_S = 0.5


def env_name(env_id: int | None) -> str:
    """The honed environment name of an Atropos environment: `atropos_<env_id>` (the API
    tells a trainer environments' ids, not their names)."""
    return "atropos" if env_id is None else f"atropos_{env_id}"


def _rows(data: dict[str, Any], key: str, n: int, where: str) -> list[Any] | None:
    """A per-sequence field of a group, `None` when it is absent or empty (BaseEnv sends
    `[]` for fields it did not fill)."""
    value = data.get(key)
    if not value:
        return None
    if not isinstance(value, list) or len(value) != n:
        raise HonedError(f"{where}: '{key}' has {len(value)} rows for {n} sequences")
    return value


def _per_token(values: list[float], length: int, key: str, where: str) -> list[float]:
    if len(values) == 1 and length > 1:
        values = values * length  # one value for the whole sequence
    if len(values) != length:
        raise HonedError(f"{where}: '{key}' has {len(values)} values for {length} tokens")
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise HonedError(f"{where}: '{key}' holds a value that is not finite")
    return out


def to_group(data: dict[str, Any], decode: Callable[[list[int]], str]) -> tuple[Group, bool]:
    """One of Atropos's scored groups as a honed `Group`, and whether it came with the
    server's log-probs.

    Each sequence becomes one segment: the tokens before the first trained one (`masks` is
    −100 there) are the prompt, the rest the completion, with a loss mask that is 0 wherever
    `masks` is −100 (tool output and user turns inside a multi-turn completion). `scores` are
    the rewards (`success` is a score above 0: Atropos environments score a right answer 1 and
    a wrong one 0 or −1); `inference_logprobs` (Atropos puts 1.0 at untrained positions) are
    the behaviour log-probs; per-token `advantages`, and `overrides` with
    `set_advantage_to_zero`, fix the segments' advantages (`Segment.advantages`).
    `ref_logprobs` are not used (honed scores its own reference); images and distillation
    targets are refused.

    Long because each of Atropos's fields is read and checked in one place, in the order
    the segment needs them; split, the checks would be far from the fields they guard.
    """
    env_id = data.get("env_id")
    where = f"a group from Atropos environment {env_id}"
    tokens, masks, scores = data.get("tokens"), data.get("masks"), data.get("scores")
    if not tokens or not isinstance(tokens, list):
        raise HonedError(f"{where} has no tokens")
    n = len(tokens)
    masks = _rows(data, "masks", n, where)
    scores = _rows(data, "scores", n, where)
    if masks is None or scores is None:
        raise HonedError(f"{where} needs 'masks' and 'scores' for its {n} sequences")
    for key in ("images", "distill_token_ids", "distill_logprobs"):
        if data.get(key):
            raise HonedError(
                f"{where} carries '{key}': honed trains text policies by GRPO, not on images "
                "or distillation targets"
            )
    inference = _rows(data, "inference_logprobs", n, where)
    advantages = _rows(data, "advantages", n, where)
    overrides = _rows(data, "overrides", n, where) or [{}] * n
    trajectories = []
    for i in range(n):
        ids, mask = [int(t) for t in tokens[i]], list(masks[i])
        if len(mask) != len(ids):
            raise HonedError(f"{where}: sequence {i} has {len(ids)} tokens and {len(mask)} masks")
        trained = [m != MASKED for m in mask]
        # the first token has nothing before it to be predicted from: it is always prompt
        start = next((j for j in range(1, len(ids)) if trained[j]), len(ids))
        completion_mask = [int(t) for t in trained[start:]]
        seg_logprobs = [0.0] * (len(ids) - start)
        if inference is not None:
            values = _per_token(inference[i], len(ids), "inference_logprobs", where)[start:]
            seg_logprobs = [v if t else 0.0 for v, t in zip(values, completion_mask, strict=True)]
        fixed = None
        if advantages is not None:
            fixed = _per_token(advantages[i], len(ids), "advantages", where)[start:]
        override = overrides[i] if isinstance(overrides[i], dict) else {}
        if override.get("set_advantage_to_zero"):
            fixed = [0.0] * (len(ids) - start)
        segment = Segment(
            prompt_ids=ids[:start],
            completion_ids=ids[start:],
            logprobs=seg_logprobs,
            loss_mask=completion_mask,
            advantages=fixed,
        )
        score = float(scores[i])
        trajectories.append(
            Trajectory(
                segments=[segment],
                reward=score,
                success=float(score > 0),
                prompt_text=decode(ids[:start]),
                completion_text=decode(ids[start:]),
                info={"atropos_env_id": env_id},
            )
        )
    prompt = json.dumps(trajectories[0].segments[0].prompt_ids).encode()
    key = hashlib.blake2b(prompt, digest_size=8).hexdigest()
    group = Group(env=env_name(env_id), item_key=key, trajectories=trajectories)
    return group, inference is not None


class AtroposAPI:
    """The trainer's calls to the trajectory API: register, pull a batch, read the status."""

    def __init__(self, url: Endpoint, timeout_s: float = 30.0) -> None:
        if not isinstance(url, Endpoint):
            raise TypeError(
                f"the Atropos API is an Endpoint (honed.reach), not {type(url).__name__}"
            )
        self.url = url
        self.http = httpx.Client(timeout=timeout_s, trust_env=False)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = self.http.request(method, str(self.url.child(path.lstrip("/"))), json=body)
        except httpx.TransportError as exc:
            raise HonedError(
                f"cannot reach the Atropos API at {self.url} ({type(exc).__name__}); start it "
                "with `run-api --host 127.0.0.1 --port PORT` and set distributed.api_url"
            ) from None
        if response.status_code >= 400:
            raise HonedError(
                f"the Atropos API at {self.url} answered {method} {path} with HTTP "
                f"{response.status_code}: {response.text[:200]}"
            )
        try:
            return response.json()
        except ValueError:
            raise HonedError(
                f"the Atropos API at {self.url} answered {method} {path} with no JSON: "
                f"{response.text[:200]!r}"
            ) from None

    def register(self, registration: dict[str, Any]) -> None:
        reply = self._call("POST", "/register", registration)
        if not isinstance(reply, dict) or "uuid" not in reply:
            raise HonedError(f"the Atropos API at {self.url} refused the trainer: {reply!r:.200}")

    def batch(self) -> list[dict[str, Any]] | None:
        """A batch of scored groups, or None while the API has too few."""
        reply = self._call("GET", "/batch")
        if isinstance(reply, dict) and reply.get("status") == "error":
            raise HonedError(f"the Atropos API at {self.url}: {reply.get('message')}")
        batch = reply.get("batch") if isinstance(reply, dict) else None
        return batch or None

    def status(self) -> dict[str, Any]:
        reply = self._call("GET", "/status")
        return reply if isinstance(reply, dict) else {}

    def close(self) -> None:
        self.http.close()


def registration(config: Config, policy: Policy, run_dir: Path, step: int) -> dict[str, Any]:
    """What honed tells the API about itself (see the module docstring)."""
    trainer, logging = config.trainer, config.logging
    longest = getattr(policy.model.config, "max_position_embeddings", None)
    return {
        "wandb_group": Path(run_dir).name if logging.wandb else "",
        "wandb_project": logging.wandb_project if logging.wandb else "",
        "batch_size": trainer.prompts_per_step * trainer.num_generations,
        "max_token_len": int(longest) if longest else -1,
        "checkpoint_dir": str(Path(run_dir).resolve()),
        "save_checkpoint_interval": config.checkpoint.every or -1,
        "starting_step": step,
        "num_steps": trainer.max_steps,
    }


class AtroposBackend:
    """A rollout backend whose groups come from Atropos environments (a `RolloutBackend`:
    requests' items are ignored, since the environments choose their own)."""

    def __init__(
        self,
        config: Config,
        policy: Policy,
        run_dir: Path,
        weight_sync: WeightSync | None,
        clients: Sequence[ChatClient] = (),
        api: AtroposAPI | None = None,
    ) -> None:
        """`weight_sync` pushes weights to the environments' inference server through
        `clients` (closed with the backend); `api` is the trajectory API's client."""
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise HonedError(
                "distributed.backend: atropos runs one learner process (the one that pulls "
                "batches); drop --nproc / torchrun"
            )
        if config.distributed.api_url is None:
            raise HonedError("distributed.backend: atropos needs distributed.api_url")
        self.config = config
        self.settings = config.trainer
        self.policy = policy
        self.run_dir = Path(run_dir)
        self.weight_sync = weight_sync
        self.clients = list(clients)
        self.api = api or AtroposAPI(config.distributed.api_url)
        self.timeout_s = config.distributed.batch_timeout_s
        self.version = 0
        self.registered = False
        self.batches = 0
        self.wait_s = 0.0

    def sync_weights(self, policy: Policy, version: int) -> None:
        self.policy = policy
        if self.weight_sync is not None:
            version = self.weight_sync.push(policy, version)
        self.version = version

    def submit(self, request: RolloutRequest) -> None:
        """Nothing to start: the environments generate on their own."""

    def result(self, request: RolloutRequest) -> list[RolledGroup]:
        if not self.registered:
            self.api.register(registration(self.config, self.policy, self.run_dir, request.step))
            self.registered = True
        out = []
        for data in self._pull():
            group, sampled = to_group(data, self.policy.decode)
            if not sampled:
                self._score(group)
            out.append(
                RolledGroup(group, reward_stats(group, self.settings), self.version, not sampled)
            )
        return out

    def _pull(self) -> list[dict[str, Any]]:
        started = time.monotonic()
        while True:
            batch = self.api.batch()
            if batch is not None:
                self.batches += 1
                self.wait_s = time.monotonic() - started
                return batch
            if time.monotonic() - started > self.timeout_s:
                raise HonedError(
                    f"no batch from the Atropos API at {self.api.url} in {self.timeout_s:g} s "
                    f"(status: {self.api.status()}); are the environments running and posting "
                    "to it, with a group size that divides the batch of "
                    f"{self.settings.prompts_per_step * self.settings.num_generations} "
                    "sequences?"
                )
            time.sleep(POLL_S)

    def _score(self, group: Group) -> None:
        """The log-probs of a group that came without any, scored by the learner: its π_old
        is then the behaviour policy, and the group trains as on-policy."""
        segments = [s for t in group.trajectories for s in t.segments if s.completion_ids]
        if not segments:
            return
        batch = build_batch(
            [s.prompt_ids for s in segments],
            [s.completion_ids for s in segments],
            [s.mask() for s in segments],
            self.policy.pad_id,
        ).to(self.policy.device)
        logp = frozen_logprobs(self.policy.model, batch, self.settings.temperature).cpu()
        for row, s in enumerate(segments):
            s.logprobs = logp[row, : len(s.completion_ids)].tolist()

    def metrics(self) -> dict[str, float]:
        return {"atropos/batches": float(self.batches), "atropos/wait_time": self.wait_s}

    def close(self) -> None:
        self.api.close()
        for client in self.clients:
            client.close()
