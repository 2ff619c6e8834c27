"""Typed configuration: YAML files mapped onto pydantic models, with dotted overrides.

Every model forbids unknown keys, so a typo is an error naming the key and the closest valid
one instead of a setting silently ignored. Option names follow TRL's `GRPOConfig` where the
meaning is the same (`num_generations`, `beta`, `epsilon`, `epsilon_high`, `loss_type`,
`scale_rewards`, `learning_rate`, `max_steps`, `max_completion_length`, `temperature`, `seed`,
`use_bias_correction_kl`), so a TRL user's settings carry over; several defaults are honed's
own (the README's configuration reference lists where they and the objective differ from TRL).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from honed.errors import HonedDeprecationWarning, HonedError, did_you_mean
from honed.types import Split


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TinyModelConfig(Strict):
    """Shape of the embedded Llama-architecture policy built from scratch."""

    hidden_size: int = Field(128, ge=8)
    num_hidden_layers: int = Field(4, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(384, ge=8)
    max_position_embeddings: int = Field(512, ge=16)

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        return self


# Sets of allowed values that lower-level modules also check: declared here once, and read
# there with typing.get_args.
LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]
NormMode = Literal["zscore", "minmax", "none"]


class LoraSettings(Strict):
    """LoRA adapters (peft): only they train; `target_modules` is a list of module names or
    `all-linear` (every linear layer but the output head, as in peft)."""

    r: int = Field(16, ge=1)
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"


class PolicyConfig(Strict):
    """`model: tiny` builds the embedded default; `smollm2-135m-instruct` (installed by `make
    smollm2`), a `.gguf` file, a path to a local Hugging Face model folder or a Hub id found in
    the local Hugging Face cache load a real one (`honed.models.sources`). `gguf_file` picks a
    file in a folder holding several. `device` and `dtype` say where and in which precision
    the policy trains (`honed.models.device`)."""

    model: str = "tiny"
    gguf_file: str | None = None
    tiny: TinyModelConfig = TinyModelConfig()
    chat_template: bool = False
    device: str = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    attn_implementation: str | None = None
    gradient_checkpointing: bool = False
    lora: LoraSettings | None = None

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.match(r"^(auto|cpu|mps|cuda(:\d+)?)$", value):
            raise ValueError(f"must be auto, cpu, cuda, cuda:N or mps, not {value!r}")
        return value


class EnvConfig(Strict):
    """One environment of the mixture.

    `name` identifies it in metrics and must be unique; `type` is a registered environment
    (`addition`, `dataset`, ...) or `module:Class`, and defaults to `name`.
    """

    name: str
    type: str | None = None
    weight: float = Field(1.0, gt=0)
    min_share: float = Field(0.0, ge=0, le=1)
    args: dict[str, Any] = Field(default_factory=dict)

    @property
    def env_type(self) -> str:
        return self.type or self.name


def check_envs(envs: list[EnvConfig]) -> None:
    """A mixture needs environments with unique names and satisfiable minimum shares."""
    names = [e.name for e in envs]
    if not names:
        raise ValueError("at least one environment is needed under 'envs'")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"environment names must be unique; repeated: {', '.join(dupes)}")
    if sum(e.min_share for e in envs) > 1 + 1e-9:
        raise ValueError("the environments' min_share values add up to more than 1")


class TrainerConfig(Strict):
    """The GRPO loop. Keys are named as in TRL's GRPOConfig where the meaning is the same; the
    defaults are honed's own (README, configuration reference)."""

    max_steps: int = Field(100, ge=0)
    # a budget in completions generated (every group drawn counts); with max_steps, the first
    # one reached ends the run
    max_rollouts: int | None = Field(None, ge=1)
    prompts_per_step: int = Field(8, ge=1)
    num_generations: int = Field(8, ge=2)
    learning_rate: float = Field(1e-6, gt=0)
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    max_grad_norm: float | None = 1.0
    # generation
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_completion_length: int = Field(256, ge=1)
    # objective
    loss_type: LossType = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    epsilon: float = Field(0.2, ge=0)
    epsilon_high: float | None = None
    beta: float = Field(0.0, ge=0)
    # the KL term of the loss (docs/kl.md: k2's gradient is that of KL(pi || ref), k3's that of
    # KL(ref || pi), k1's is zero); kl_in_reward moves the KL into the rewards as beta * k1
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    # multiply the KL term by the ratio pi / pi_old (differentiable), as TRL does by default:
    # its expected gradient is then that of KL(pi || ref) for k1 and k3 (docs/kl.md)
    use_bias_correction_kl: bool = False
    kl_in_reward: bool = False
    num_iterations: int = Field(1, ge=1)
    micro_batch_size: int | None = Field(None, ge=1)
    # with several learner processes (`honed train --nproc N`, torchrun): data-parallel with
    # replicated weights (ddp) or with weights, gradients and optimizer state sharded (fsdp)
    parallel: Literal["ddp", "fsdp"] = "ddp"
    # zero the model's dropout for the whole run, so the update scores what pi_old scored
    disable_dropout: bool = False
    # zero-spread groups and dynamic sampling
    filter_zero_std: bool = True
    zero_std_tolerance: float = Field(1e-6, ge=0)
    dynamic_sampling: bool = False
    max_sampling_rounds: int = Field(4, ge=1)
    # truncated completions
    mask_truncated_completions: bool = False
    overlong_buffer: int = Field(0, ge=0)
    overlong_penalty: float = Field(1.0, ge=0)
    on_nonfinite: Literal["stop", "skip_step"] = Field(
        "stop",
        description="A NaN or infinite sampling log-prob, reward, log-prob, advantage, loss or "
        "gradient norm in a step: `stop` ends the run there (exit code 2, one line naming the "
        "quantity, the step and the environments; nothing of the step is saved), `skip_step` "
        "drops the step (no optimizer step, the learning-rate schedule advances) and logs it as "
        "`nonfinite/skipped`. Non-finite weights at start or resume always stop the run.",
    )

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @model_validator(mode="after")
    def _kl(self) -> TrainerConfig:
        if self.kl_in_reward and self.beta == 0:
            raise ValueError(
                "kl_in_reward: true needs beta > 0 (beta weighs the KL penalty in the reward)"
            )
        if self.kl_in_reward and self.use_bias_correction_kl:
            raise ValueError(
                "use_bias_correction_kl weighs the KL term of the loss, and with kl_in_reward: "
                "true the loss has none; set one of them"
            )
        return self


class SFTConfig(Strict):
    """Supervised warm-start on the environments' reference solutions (0 steps = off)."""

    steps: int = Field(0, ge=0)
    batch_size: int = Field(32, ge=1)
    learning_rate: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(0, ge=0)
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "cosine"
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = 1.0
    # 0: train only on the targets; > 0: also on the prompts' tokens, at this weight
    prompt_loss_weight: float = Field(0.0, ge=0)


# The curriculum's strategies (Atropos's three and honed's `frontier`) and competence schedules,
# declared once: `honed.sampling.curriculum` derives its `CurriculumStrategy` enum and its
# validation tuples from these.
StrategyName = Literal["uniform", "easy_first", "competence_based", "frontier"]
CompetenceName = Literal["gaussian", "platanios"]


class CurriculumConfig(Strict):
    """Which items each environment practises (one `CurriculumScheduler` per environment).

    `score` is what updates an item's difficulty estimate: `success` (a rate in [0, 1]) or the
    raw `reward`. `frontier`, and `competence_based` with `competence: platanios`, read the score
    as a success rate (p(1 - p); the share of items at or above `competence_threshold`), which a
    reward is not in general (partial credit, penalties, KL): with `score: reward` they need
    `reward_range: [lo, hi]`, every reward's bounds, and see (reward - lo) / (hi - lo); a reward
    outside the range stops the run. Only the ranks of the scores matter to the other strategies.

    `competence` chooses how `competence_based` picks bins: `platanios` (honed's, the default
    here since honed's `competence_based` has always meant it) or `gaussian` (Atropos's formula,
    the default of `CurriculumScheduler` itself; docs/migrating.md).
    """

    strategy: StrategyName = "uniform"
    competence: CompetenceName = "platanios"
    n_bins: int = Field(5, ge=1)
    temperature: float = 1.0
    ema_alpha: float = 0.3
    competence_threshold: float = 0.5
    unseen_share: float | None = Field(None, ge=0, le=1)
    score: Literal["success", "reward"] = "success"
    reward_range: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _score_fits_strategy(self) -> CurriculumConfig:
        if self.reward_range is not None:
            lo, hi = self.reward_range
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(
                    "curriculum.reward_range must be [lo, hi] with finite lo < hi, "
                    f"got [{lo}, {hi}]"
                )
            if self.score != "reward":
                raise ValueError(
                    "curriculum.reward_range maps rewards and applies only with "
                    "curriculum.score: reward"
                )
        reads_rate = self.strategy == "frontier" or (
            self.strategy == "competence_based" and self.competence == "platanios"
        )
        if reads_rate and self.score == "reward" and self.reward_range is None:
            strategy = "frontier" if self.strategy == "frontier" else "competence_based (platanios)"
            raise ValueError(
                f"curriculum.score: reward cannot drive curriculum.strategy {strategy}, which "
                "reads each score as a success rate in [0, 1]; use curriculum.score: success, "
                "or give curriculum.reward_range: [lo, hi] (the bounds of every reward) to map "
                "rewards onto [0, 1]"
            )
        return self


class RewardNormConfig(Strict):
    """Online normalisation of each environment's rewards before group advantages.

    An affine map is undone by per-group z-scoring (`scale_rewards: group`), so it only changes
    training with `scale_rewards: batch | none`, or through `clip`. Off by default.
    """

    mode: NormMode = "none"
    clip: float | None = Field(5.0, ge=0)
    warmup: int = Field(10, ge=0)
    eps: float = Field(1e-8, ge=0)


class EvalConfig(Strict):
    """Held-out evaluation: before GRPO (after any warm-start), every `every` steps, and at the end."""

    split: Split = "test"
    num_items: int | None = Field(200, ge=1)
    temperature: float = Field(0.0, ge=0)
    every: int = Field(0, ge=0)
    # k > 0: the policy GRPO starts from is also evaluated with k solved train examples before
    # each prompt (single-turn environments), the prompting baseline the trained one must beat
    few_shot: int = Field(0, ge=0)


class CheckpointConfig(Strict):
    every: int = Field(50, ge=0)
    keep_last: int = Field(2, ge=1)


class LoggingConfig(Strict):
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "honed"
    mlflow: bool = False
    samples_per_step: int = Field(4, ge=0)
    progress: bool = True
    # GRPO: groups per step kept in rollouts/ for `honed view` (0: none), and each file's cap
    rollouts_per_step: int = Field(4, ge=0)
    rollouts_max_bytes: int = Field(262_144, ge=16_384)


def key_over_plain_http(url: str, api_key_env: str | None, allowed: bool) -> str | None:
    """Why sending the key to `url` is refused, or `None`: a key goes over plain http:// only
    to this machine, unless the user allows it (a network of their own)."""
    parsed = urlparse(url)
    local = parsed.hostname in ("localhost", "127.0.0.1", "::1")
    if not api_key_env or parsed.scheme != "http" or local or allowed:
        return None
    return (
        f"{url} is plain http:// to another machine, so the key in {api_key_env} would cross "
        "the network unencrypted; use https://, or set allow_insecure_http: true if the "
        "network is yours"
    )


class ServerConfig(Strict):
    """OpenAI-compatible inference servers (vLLM, SGLang) that generate the rollouts.

    `base_url` is one server or a list (`http://host:8000/v1`); rows are spread over them in
    turn. The learner sends token ids and asks for sampled token ids and log-probs, so every
    server must serve the policy's tokenizer. `weight_sync` says how new weights reach them:
    `reload` saves the policy under `weights_dir` (a path every server can read) and POSTs
    `{"model_path": <dir>}` to `reload_endpoint` (SGLang's `/update_weights_from_disk`); `none`
    leaves the served weights alone; `module:Class` names your own hook.
    """

    base_url: list[str]
    model: str = Field(min_length=1)
    api_key_env: str | None = None
    timeout_s: float = Field(300.0, gt=0)
    max_retries: int = Field(4, ge=0)
    concurrency: int = Field(64, ge=1)
    weight_sync: str = "reload"
    reload_endpoint: str = "/update_weights_from_disk"
    weights_dir: str | None = None
    allow_insecure_http: bool = False

    @model_validator(mode="after")
    def _key_only_over_https(self) -> ServerConfig:
        for url in self.base_url:
            problem = key_over_plain_http(url, self.api_key_env, self.allow_insecure_http)
            if problem:
                raise ValueError(problem)
        return self

    @field_validator("base_url", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        urls = [value] if isinstance(value, str) else value
        if not urls:
            raise ValueError("give at least one server URL")
        for url in urls:
            if not str(url).startswith(("http://", "https://")):
                raise ValueError(f"a server URL must start with http:// or https://, got {url!r}")
        return [str(url).rstrip("/") for url in urls]


class DistributedConfig(Strict):
    """Where rollouts are generated: in the learner (`inprocess`, the default), on Ray actors
    (`ray`), or on inference servers (`server`; with `ray`, a `server` section makes the Ray
    workers generate through the servers). The learner alone owns the sampler and optimizer.

    `max_staleness` lets rollouts run that many optimizer steps ahead of the learner (0:
    synchronous); off-policy tokens are reweighted by min(π_old / μ, `importance_sampling_cap`).
    """

    backend: Literal["inprocess", "ray", "server"] = "inprocess"
    num_rollout_workers: int = Field(2, ge=1)
    address: str = "local"
    cpus_per_worker: float = Field(1.0, gt=0)
    max_worker_restarts: int = Field(3, ge=0)
    max_staleness: int = Field(0, ge=0)
    importance_sampling_cap: float = Field(2.0, ge=1)
    server: ServerConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DistributedConfig:
        if self.address not in ("local", "auto") and not self.address.startswith("ray://"):
            raise ValueError(
                f"address must be local, auto or ray://host:port, not {self.address!r}"
            )
        if self.backend == "server" and self.server is None:
            raise ValueError("backend 'server' needs a 'server' section (base_url, model)")
        if self.backend == "inprocess" and self.server is not None:
            raise ValueError("a 'server' section needs backend 'server' (or 'ray')")
        return self


class Config(Strict):
    seed: int = 0
    run_dir: str | None = None
    torch_threads: int | None = Field(None, ge=1)
    policy: PolicyConfig = PolicyConfig()
    envs: list[EnvConfig] = Field(default_factory=lambda: [EnvConfig(name="addition")])
    trainer: TrainerConfig = TrainerConfig()
    sft: SFTConfig = SFTConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    reward_norm: RewardNormConfig = RewardNormConfig()
    eval: EvalConfig = EvalConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    distributed: DistributedConfig = DistributedConfig()

    @model_validator(mode="after")
    def _envs(self) -> Config:
        check_envs(self.envs)
        return self


# --------------------------------------------------------------------------- loading

ModelT = TypeVar("ModelT", bound=BaseModel)


def _parse_value(text: str) -> Any:
    """`-o k=v` values are YAML scalars or flow collections: `20`, `true`, `[1, 2]`, `a/b`."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value` override in place; list items are addressed by index."""
    if "=" not in assignment:
        raise HonedError(
            f"override '{assignment}' must look like key=value (e.g. trainer.max_steps=20)"
        )
    key, _, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not all(parts):
        raise HonedError(f"override '{assignment}' has an empty key part")
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        path = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node = node[_list_index(node, part, path)]
        else:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
        if not isinstance(node, dict | list):
            raise HonedError(f"override '{assignment}': '{path}' is a value, not a section")
    last = parts[-1]
    if isinstance(node, list):
        node[_list_index(node, last, key)] = _parse_value(raw)
    else:
        node[last] = _parse_value(raw)


def _list_index(node: list, part: str, path: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise HonedError(
            f"override key '{path}': '{part}' is not an index of a list of {len(node)}"
        )
    return int(part)


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Valid keys at the location of a validation error, for 'did you mean'."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if hasattr(current, "model_fields") else None
        if field is None:
            return []
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if current is None:
            return []
    return list(current.model_fields) if current is not None else []


def _explain(err: ValidationError, source: str, model: type[BaseModel] = Config) -> HonedError:
    """Turn pydantic's report into one line naming the key (and the closest valid one)."""
    first = err.errors()[0]
    loc = tuple(first["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        valid = _field_names(model, loc)
        prefix = ".".join(str(p) for p in loc[:-1])
        hint = did_you_mean(str(loc[-1]), valid)
        if hint and prefix:
            hint = hint.replace("'", f"'{prefix}.", 1)
        return HonedError(f"{source}: unknown config key '{key}'{hint}")
    message = first["msg"].removeprefix("Value error, ")
    if not loc:
        return HonedError(f"{source}: {message}")
    return HonedError(f"{source}: invalid value for '{key}': {message}")


def renamed_keys(data: Any, renames: Mapping[str, str], where: str = "", warn: bool = True) -> Any:
    """`data` with each deprecated key of `renames` (old -> new) moved to its new name, and one
    `HonedDeprecationWarning` per old key found (none with `warn=False`, for a run's own saved
    config). Giving both names is an error: which value was meant is not known. For a pydantic
    `model_validator(mode="before")`; anything but a mapping passes through unchanged."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise ValueError(
                f"'{where}{old}' is the old name of '{where}{new}' and both are given; keep "
                f"'{where}{new}'"
            )
        if warn:
            warnings.warn(
                f"config key '{where}{old}' is deprecated: use '{where}{new}' (same meaning)",
                HonedDeprecationWarning,
                stacklevel=2,
            )
        out = {(new if key == old else key): value for key, value in out.items()}
    return out


def load_model(
    model: type[ModelT],
    path: str | Path | None,
    overrides: list[str] | None = None,
    transform: Callable[[dict[str, Any]], None] | None = None,
) -> ModelT:
    """Read a YAML file (or start from defaults when `path` is None), apply `-o` overrides and
    validate the result as `model`; every problem is a one-line `HonedError`.

    Shared by every command that takes a config (`honed train`, `honed skills train`, ...).
    `transform` edits the raw data before the overrides (`honed.runs.trust` removes key names
    from a run directory's own config with it).
    """
    data: dict[str, Any] = {}
    source = "config"
    if path is not None:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise HonedError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise HonedError(f"{path} is not valid YAML: {exc}".splitlines()[0]) from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise HonedError(f"{path}: the top level must be a mapping of sections")
        data = loaded or {}
    if transform is not None:
        transform(data)
    for assignment in overrides or []:
        apply_override(data, assignment)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise _explain(err, source, model) from err


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a GRPO config (or start from defaults when `path` is None) and apply overrides."""
    return load_model(Config, path, overrides)


def config_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> list[tuple[str, Any, Any]]:
    """The settings that differ between two resolved configs: (dotted key, before, after).

    Sections are compared key by key and lists item by item (`envs.0.weight`); a list whose
    length changed is one change of the whole list. Used on `--resume`, where the checkpoint
    supplies the state and the config in force the settings, to say what changed.
    """
    changes: list[tuple[str, Any, Any]] = []
    for key in [*before, *(k for k in after if k not in before)]:
        name = f"{prefix}{key}"
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changes += config_changes(old, new, f"{name}.")
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                if isinstance(a, Mapping) and isinstance(b, Mapping):
                    changes += config_changes(a, b, f"{name}.{i}.")
                elif a != b:
                    changes.append((f"{name}.{i}", a, b))
        elif old != new:
            changes.append((name, old, new))
    return changes


# Longest value a change line shows; longer ones (an inline skill document) are cut.
SHOWN_CHARS = 60


def format_change(key: str, before: Any, after: Any) -> str:
    """One line per changed setting, as a resumed run prints it: `trainer.max_steps: 4 -> 8`.

    Strings are shown bare and other values as JSON, always on one line and cut at
    `SHOWN_CHARS`, so that a changed inline document cannot flood the terminal.
    """

    def show(value: Any) -> str:
        text = value if isinstance(value, str) and "\n" not in value else json.dumps(value)
        return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"

    return f"{key}: {show(before)} -> {show(after)}"


def dump_config(config: BaseModel) -> str:
    """The resolved config as YAML, every default spelled out (written into each run)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
