"""Typed configuration: YAML files mapped onto pydantic models, with dotted overrides.

Every model forbids unknown keys, so a typo is an error naming the key and the closest valid
one instead of a setting silently ignored. Option names follow TRL's `GRPOConfig` where the
meaning is the same (`num_generations`, `beta`, `epsilon`, `epsilon_high`, `loss_type`,
`scale_rewards`, `learning_rate`, `max_steps`, `max_completion_length`, `temperature`, `seed`,
`use_bias_correction_kl`), so a TRL user's settings carry over; several defaults are honed's
own (the README's configuration reference lists where they and the objective differ from TRL).

Each key is documented where it is declared, in its `Field(description=...)`: the README's
reference tables, `honed config` and the JSON schema editors validate YAML with are generated
from it (`honed.config_reference`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from honed.errors import HonedError, did_you_mean, warn_renamed
from honed.reach import CONFIG_DIR, Endpoint, ImportSpec, parse_free
from honed.rewards.normalizer import NormMode
from honed.types import Split
from honed.yaml_data import load_yaml, read_yaml


class Strict(BaseModel):
    """A config section: unknown keys are errors, and so are invalid values assigned later."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TinyModelConfig(Strict):
    """Shape of the embedded Llama-architecture policy built from scratch."""

    hidden_size: int = Field(
        128, ge=8, description="Width of the residual stream; a multiple of num_attention_heads."
    )
    num_hidden_layers: int = Field(4, ge=1, description="Decoder layers.")
    num_attention_heads: int = Field(4, ge=1, description="Attention heads per layer.")
    intermediate_size: int = Field(384, ge=8, description="Width of each layer's gated MLP.")
    max_position_embeddings: int = Field(
        512,
        ge=16,
        description="Longest sequence the model reads, prompt and completion together, in "
        "tokens (characters: the tokenizer of `tiny` is character-level).",
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        return self


# Sets of allowed values that higher modules also check (rl/, models/): declared here once,
# and read there with typing.get_args, so a value the config accepts is one they handle. The
# reward normaliser's modes sit below the config, in `honed.rewards.normalizer` (`NormMode`).
LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]
ScaleRewards = Literal["group", "batch", "none"]
KlEstimator = Literal["k1", "k2", "k3"]
LrSchedulerType = Literal["constant", "linear", "cosine"]
# torch dtypes by their torch names (`honed.models.device.DTYPES` maps them)
DtypeName = Literal["float32", "bfloat16", "float16"]


class LoraSettings(Strict):
    """LoRA adapters, with peft's settings under shorter names."""

    r: int = Field(16, ge=1, description="Rank of each adapter (peft: `r`).")
    alpha: float = Field(
        32.0,
        gt=0,
        description="Scale of the adapters' update, which is multiplied by alpha / r (peft: "
        "`lora_alpha`).",
    )
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the adapters' input (peft: `lora_dropout`)."
    )
    target_modules: str | list[str] = Field(
        "all-linear",
        description="The modules that get adapters: a list of module names, or `all-linear` "
        "(every linear layer but the output head, as in peft).",
    )


class PolicyConfig(Strict):
    """The trained model: where it comes from (`honed.models.sources`), and where and in which
    precision it trains (`honed.models.device`)."""

    model: str = Field(
        "tiny",
        description="`tiny` builds the embedded 0.9 M-parameter Llama from its config (its shape "
        "is `policy.tiny`); `smollm2-135m-instruct` loads SmolLM2-135M-Instruct (install it "
        "with `make smollm2`); a path to a `.gguf` file or to a folder holding one loads that "
        "(dequantised once to float32 and cached as a Hugging Face folder under `$HONED_CACHE`, "
        "default `~/.cache/honed`); a path to a Hugging Face model folder loads it as it is; a "
        "Hub id (`org/name`) is looked up in the local Hugging Face cache (`$HF_HUB_CACHE`), "
        "downloaded when the Hub is reachable.",
    )
    gguf_file: str | None = Field(
        None,
        description="Which `.gguf` file of the folder `policy.model` names, when it holds several.",
    )
    tiny: TinyModelConfig = Field(
        TinyModelConfig(),
        description="Shape of the embedded Llama that `policy.model: tiny` builds from scratch.",
    )
    chat_template: bool = Field(
        False,
        description="Render every prompt with the tokenizer's chat template "
        "(`add_generation_prompt=True`; a text prompt becomes one user turn, chat-message "
        "prompts are rendered as they are) and stop completions at the template's end-of-turn "
        "token as well as at end-of-sequence. Turn it on for an instruction-tuned model.",
    )
    device: str = Field(
        "auto",
        description="Where the model, the reference, every batch and the loss live: `auto` "
        "(`cuda` if available, else `mps`, else `cpu`), `cpu`, `cuda`, `cuda:N`, `mps`; in a "
        "multi-process run `auto` and `cuda` are each process's own GPU (`LOCAL_RANK`). "
        "Environments and rewards stay on the CPU.",
    )
    dtype: Literal["auto", DtypeName] = Field(
        "auto",
        description="The weights' and the optimizer state's dtype: `auto` is bfloat16 on a CUDA "
        "device that supports it and float32 elsewhere. Log-probs are always computed in "
        'float32 (README, "Train on a GPU"); keep float32 for float32 master weights.',
    )
    attn_implementation: str | None = Field(
        None,
        description="Attention kernel, passed to `transformers`: `sdpa`, `flash_attention_2` "
        "(needs the `flash-attn` package and a GPU), `eager`; `null`: the model's default.",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each layer's activations in the backward pass instead of "
        "keeping them: less memory for about a third more compute.",
    )
    lora: LoraSettings | None = Field(
        None,
        description="Train LoRA adapters instead of every weight (peft, `pip install "
        "'honed[lora]'`); `null`: full fine-tuning. Only the adapters train, the KL reference "
        "is the same model with its adapters off, checkpoints hold the adapter in peft's "
        "format, and `honed export` merges it. Give `{}` for the defaults.",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.match(r"^(auto|cpu|mps|cuda(:\d+)?)$", value):
            raise ValueError(f"must be auto, cpu, cuda, cuda:N or mps, not {value!r}")
        return value


class EnvConfig(Strict):
    """One environment of the mixture."""

    name: str = Field(
        description="The environment's name in metrics and in the mixture, unique in `envs`; "
        "its type too when `type` is not given."
    )
    type: str | None = Field(
        None,
        description="A registered environment (`addition`, `dataset`, `tools`, `memory`, `qa`, "
        "...) or your own as `module:Class`; `null`: the `name`.",
    )
    weight: float = Field(
        1.0, gt=0, description="Share of each batch, relative to the other environments'."
    )
    min_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Minimum share of every batch (the environments' minimums add up to at "
        "most 1).",
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description='The environment\'s own arguments (README, "Environment arguments"; each '
        "environment's documentation lists its own).",
    )

    @field_validator("type")
    @classmethod
    def _type(cls, value: str | None, info: ValidationInfo) -> str | None:
        return named_or_import(value, info)

    @field_validator("args")
    @classmethod
    def _args(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return parse_free(value, config_dir(info))

    @model_validator(mode="after")
    def _verifiers_import(self, info: ValidationInfo) -> EnvConfig:
        """A `verifiers` environment's `env` names code without a `:` (a package, module or
        `.py` file whose `load_environment` runs): parsed here into the `ImportSpec` it
        imports, so that `honed.reach.reached` lists it and the loader takes only that."""
        env = self.args.get("env")
        if self.env_type == "verifiers" and isinstance(env, str):
            if not isinstance(env, ImportSpec):
                try:
                    env = ImportSpec.parse(verifiers_import(env), config_dir(info))
                except ValueError as exc:
                    raise ValueError(f"args.env: {exc}") from None
            self.args["env"] = env
        return self

    @property
    def env_type(self) -> str:
        return self.type or self.name


def verifiers_import(env: str) -> str:
    """What a verifiers environment id imports `load_environment` from: a `.py` file as given,
    or the module verifiers itself imports for it (`owner/vf-name` -> `vf_name`)."""
    if env.endswith(".py"):
        return f"{env}:load_environment"
    return f"{env.replace('-', '_').split('/')[-1]}:load_environment"


def config_dir(info: ValidationInfo) -> Path | None:
    """The directory of the config file being validated (`load_model` says), if any."""
    return info.context.get(CONFIG_DIR) if isinstance(info.context, dict) else None


def named_or_import(value: str | None, info: ValidationInfo) -> str | None:
    """A value that is a name honed knows (`addition`, `reload`) or, holding a `:`, code to
    import: parsed here as an `ImportSpec`, so that it is refused now if malformed and listed by
    `honed.reach.reached` if not."""
    if value is None or ":" not in value:
        return value
    return ImportSpec.parse(value, config_dir(info))


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


class ScreeningConfig(Strict):
    """Screening (SPEED-RL's idea): a few rollouts first, the rest of the group only where they
    disagree, so that a group without reward spread costs `rollouts` completions instead of
    `num_generations`."""

    rollouts: int = Field(
        0,
        ge=0,
        description="Rollouts each item gets first (at least 2, fewer than `num_generations`); "
        "an item whose screening rewards agree (standard deviation of the unit rewards below "
        "`zero_std_tolerance`) stops there, the others get `num_generations` − `rollouts` more "
        "and the group's advantages use all of them. Each rollout has the seed it would have "
        "in an unscreened group, so a group that goes on is the unscreened group. 0: off.",
    )


class TrainerConfig(Strict):
    """The GRPO loop. Keys are named as in TRL's GRPOConfig where the meaning is the same; the
    defaults are honed's own (README, configuration reference)."""

    max_steps: int = Field(100, ge=0, description="GRPO steps, one rollout batch each (as in TRL).")
    max_rollouts: int | None = Field(
        None,
        ge=1,
        description="Also stop after the step at which this many completions were generated "
        "(every completion counts: those of groups dynamic sampling or the zero-spread filter "
        "dropped, and the screening rollouts of `screening`): a budget in samples rather than "
        "steps, whichever of it and `max_steps` is reached first ends the run; `null`: no such "
        "budget. `rollouts/generated` (and its older name `sampling/rollouts_total`) logs the "
        "count.",
    )
    max_time_s: float | None = Field(
        None,
        gt=0,
        description="Also stop after the step during which this process has run this many "
        "seconds (counted from its start: loading, the initial evaluation and a resume's "
        "set-up included), for a job with a wall-clock limit: the step in flight finishes, its "
        "checkpoint is written and the final evaluation runs, so leave them room below the "
        "limit; `--resume` goes on from there. Several learner processes stop after the same "
        "step. `null`: no limit.",
    )
    prompts_per_step: int = Field(8, ge=1, description="Items (groups) per step.")
    num_generations: int = Field(
        8,
        ge=2,
        description="Completions per item: the group, whose mean reward is each completion's "
        "baseline (as in TRL).",
    )
    learning_rate: float = Field(
        1e-6, gt=0, description="AdamW's learning rate, after warm-up (as in TRL)."
    )
    lr_scheduler_type: LrSchedulerType = Field(
        "constant",
        description="Decay of the learning rate after the warm-up: `constant`, or `linear` or "
        "`cosine` to 0 at `max_steps` (a `torch.optim.lr_scheduler.LambdaLR`; as in TRL).",
    )
    warmup_steps: int = Field(
        0, ge=0, description="Steps of linear warm-up to `learning_rate` (as in TRL)."
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW's weight decay (as in TRL).")
    adam_beta1: float = Field(0.9, description="AdamW's β1 (as in TRL).")
    adam_beta2: float = Field(0.99, description="AdamW's β2 (as in TRL).")
    max_grad_norm: float | None = Field(
        1.0,
        description="Clip the gradient to this global norm; `null`: no clipping (as in TRL).",
    )
    temperature: float = Field(
        1.0,
        gt=0,
        description="Sampling temperature of the rollouts (as in TRL). With inference servers "
        "other than 1, start vLLM with `--logprobs-mode processed_logprobs`.",
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Nucleus sampling of the rollouts: draw from the most likely tokens whose "
        "probabilities add up to `top_p`; 1: off (as in TRL). Keep 1 with inference servers.",
    )
    max_completion_length: int = Field(
        256,
        ge=1,
        description="Tokens per completion; in a multi-turn environment, the model's tokens "
        "over the whole episode (tool results and template tokens not counted). As in TRL, "
        "whose default is 512.",
    )
    loss_type: LossType = Field(
        "dapo",
        description="What the per-token losses are divided by, fixed for the optimizer step "
        "before it is split into micro-batches: `grpo` each sequence's tokens, then the "
        "sequences; `dapo` the step's completion tokens; `bnpo` the same here (TRL divides by "
        "the micro-batch's tokens); `dr_grpo` sequences × `max_completion_length` (README, "
        '"What GRPO computes"; as in TRL).',
    )
    scale_rewards: ScaleRewards = Field(
        "group",
        description="What each group's centred rewards are divided by to give advantages: the "
        "group's standard deviation (`group`, GRPO), the batch's (`batch`), or nothing "
        "(`none`, Dr. GRPO) (as in TRL).",
    )
    epsilon: float = Field(
        0.2,
        ge=0,
        description="Clip range of the ratio π/π_old below 1, and above 1 unless "
        "`epsilon_high` is set (as in TRL).",
    )
    epsilon_high: float | None = Field(
        None,
        description="Clip range above 1; `null`: `epsilon`. Larger than `epsilon` it is DAPO's "
        "clip-higher (as in TRL).",
    )
    beta: float = Field(
        0.0,
        ge=0,
        description="KL coefficient. The reference is the policy GRPO started from; with 0 no "
        "reference model is loaded (as in TRL).",
    )
    kl_estimator: KlEstimator = Field(
        "k3",
        description="The KL term of the loss: `k3` (its gradient is that of KL(π_ref ‖ π)), "
        "`k2` (that of KL(π ‖ π_ref)) or `k1` (zero expected gradient: a warning says so); "
        "`kl_in_reward` moves the KL into the rewards as beta · k1 (`docs/kl.md`).",
    )
    use_bias_correction_kl: bool = Field(
        False,
        description="Multiply the KL term by the ratio π/π_old (with its gradient), as TRL "
        "does by default: the expected gradient becomes that of KL(π ‖ π_ref) for `k1` and "
        "`k3` (`docs/kl.md`); refused with `kl_in_reward` (as in TRL, whose default is true).",
    )
    kl_in_reward: bool = Field(
        False,
        description="Put the KL in the reward instead of the loss: each sequence's reward "
        "loses β·Σ (log π_old − log π_ref) over its tokens before advantages (the PPO-RLHF "
        "way); needs `beta` > 0.",
    )
    log_reference_kl: bool = Field(
        False,
        description="Log `kl/reference` each step: the mean per-token log π_old − log π_ref "
        "of the step's sampled tokens, an estimate of KL(π ‖ π_ref) to the policy GRPO started "
        "from (after any warm-start); loads the reference even when `beta` is 0 (one more "
        "forward pass of the policy and of the reference per step).",
    )
    importance_sampling_cap: float = Field(
        2.0,
        ge=1,
        description="C in the weight min(π_old / μ, C) of tokens sampled off-policy "
        "(asynchronous rollouts, inference servers), μ being the policy that sampled them "
        "(`rl/loss.py`). Was `distributed.importance_sampling_cap`, which still loads.",
    )
    num_iterations: int = Field(
        1,
        ge=1,
        description="Optimizer steps per rollout batch (π_old is the learner's own log-prob at "
        "the start of the step) (as in TRL).",
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Sequences per forward/backward pass, to bound memory; `null`: the whole "
        "batch at once (an update that runs out of GPU memory stops with an error naming this "
        "setting). The gradient is the same however the batch is split.",
    )
    parallel: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="With several learner processes (`honed train --nproc N`, or `torchrun`): "
        "`ddp` (every process holds the weights; gradients are summed) or `fsdp` (FSDP2 "
        "`fully_shard` per decoder layer and the root: weights, gradients and optimizer state "
        "sharded over the processes, gathered whole for rollouts, evaluations and checkpoints; "
        "rollouts in the learner, on inference servers or on Ray actors, the weights gathered "
        "for each push). The same update either way (and the same `sft.steps` warm-start), and "
        "checkpoints move between them and any number of processes.",
    )
    disable_dropout: bool = Field(
        False,
        description="Zero the model's dropout for the whole run, so that the update scores "
        "what π_old scored; otherwise the update pass runs with the model's own dropout (π_old "
        "and the reference are always scored without) (as in TRL).",
    )
    filter_zero_std: bool = Field(
        True,
        description="Drop groups whose rewards have (near-)zero spread: they carry no "
        "advantage to learn from (`frac_reward_zero_std` is logged).",
    )
    zero_std_tolerance: float = Field(
        1e-6,
        ge=0,
        description="A group whose reward standard deviation is below this has no spread.",
    )
    dynamic_sampling: bool = Field(
        False,
        description="Draw more items until `prompts_per_step` groups have spread, up to "
        "`max_sampling_rounds` rounds (DAPO's dynamic sampling).",
    )
    max_sampling_rounds: int = Field(
        4, ge=1, description="Most rounds of drawing per step with `dynamic_sampling`."
    )
    screening: ScreeningConfig = Field(
        default_factory=ScreeningConfig,
        description="Screen each item with a few rollouts before completing its group.",
    )
    mask_truncated_completions: bool = Field(
        False,
        description="No loss on completions cut at `max_completion_length` (as in TRL).",
    )
    share_prefix: bool = Field(
        False,
        description="Sampling prefills the prompt tokens every row of a batch shares (system "
        "message, tools, example conversations: most of a multi-turn prompt) once instead of "
        "once per row. Same distribution; a row's exact draw may then depend on its batch "
        "(a separate forward rounds differently in the last bits), so off by default.",
    )
    overlong_buffer: int = Field(
        0,
        ge=0,
        description="DAPO's soft overlong penalty: over the last `overlong_buffer` tokens "
        "before `max_completion_length`, the reward falls linearly to −`overlong_penalty`; "
        "0: off.",
    )
    overlong_penalty: float = Field(
        1.0,
        ge=0,
        description="The reward taken off a completion of `max_completion_length` tokens when "
        "`overlong_buffer` > 0.",
    )
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
    def _screening_fits_the_group(self) -> TrainerConfig:
        k = self.screening.rollouts
        if k and not 2 <= k < self.num_generations:
            raise ValueError(
                f"trainer.screening.rollouts must be 0 (off) or from 2 to num_generations − 1 "
                f"({self.num_generations - 1}), got {k}: one rollout always agrees with itself, "
                "and screening the whole group screens nothing"
            )
        return self

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


SFTCheckMetric = Literal["copy_accuracy", "token_accuracy"]


class SFTCheckConfig(Strict):
    """The warm-start's held-out check (`honed.rl.sft_check`): with `every` > 0 the warm-start
    stops at the first check that reaches `threshold`, and `sft.steps` is its cap."""

    every: int = Field(
        0,
        ge=0,
        description="Check every this many warm-start steps and stop once the check passes "
        "(`sft.steps` is then the cap); 0: no check, `sft.steps` steps.",
    )
    metric: SFTCheckMetric = Field(
        "copy_accuracy",
        description="`copy_accuracy` (the share of the references' copied words, names and "
        "numbers from the context, that the model predicts token by token) or `token_accuracy` "
        "(the share of the references' own tokens); both under teacher forcing, a token right "
        "when it gets more than half the probability.",
    )
    threshold: float = Field(
        0.95, gt=0, le=1, description="The check passes when the metric reaches this."
    )
    split: Split = Field(
        "validation",
        description="Whose reference solutions are checked; never `train`'s (held out).",
    )
    examples: int = Field(
        64,
        ge=1,
        description="Reference solutions checked, per environment (its split's first ones).",
    )

    @field_validator("split")
    @classmethod
    def _held_out(cls, value: str) -> str:
        if value == "train":
            raise ValueError("the check is held out: split must be validation or test")
        return value


class SFTConfig(Strict):
    """Supervised warm-start on the environments' reference solutions (0 steps = off)."""

    steps: int = Field(
        0,
        ge=0,
        description="Supervised warm-start steps on the environments' reference solutions, "
        "before GRPO (`honed sft` runs them alone); 0: none. With `check.every`, the cap; it "
        "is also the length of the learning-rate schedule, so another cap changes the "
        "warm-start even where the check stops it early.",
    )
    batch_size: int = Field(32, ge=1, description="Examples per step.")
    learning_rate: float = Field(1e-3, gt=0, description="AdamW's learning rate, after warm-up.")
    warmup_steps: int = Field(0, ge=0, description="Steps of linear warm-up.")
    lr_scheduler_type: LrSchedulerType = Field(
        "cosine",
        description="Decay after the warm-up: `constant`, or `linear` or `cosine` to 0 at `steps`.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW's weight decay.")
    max_grad_norm: float | None = Field(
        1.0, description="Clip the gradient to this global norm; `null`: no clipping."
    )
    prompt_loss_weight: float = Field(
        0.0,
        ge=0,
        description="Also train next-token prediction on the prompts' tokens, at this weight "
        "relative to the targets' (the loss is the weighted token mean); 0: targets only. "
        "Helps a model built from scratch learn to copy from its context.",
    )
    check: SFTCheckConfig = Field(
        default_factory=SFTCheckConfig,
        description="Stop the warm-start on a held-out check instead of after a fixed count.",
    )


# The curriculum's strategies (Atropos's three and honed's `frontier`) and competence schedules,
# declared once: `honed.sampling.curriculum` derives its `CurriculumStrategy` enum and its
# validation tuples from these.
StrategyName = Literal["uniform", "easy_first", "competence_based", "frontier"]
CompetenceName = Literal["gaussian", "platanios"]


SkipKey = Literal["item", "difficulty"]


class SkipConfig(Strict):
    """Skipping before rollout (GRESO, arXiv 2506.02177): items whose last groups had no reward
    spread are skipped with a probability that grows with the streak, before any completion is
    generated for them (`honed.sampling.skip`)."""

    enabled: bool = Field(
        False,
        description="Skip, before generating, items whose last k groups all succeeded (or all "
        "failed) with probability 1 − max(p^k, `p_min`), drawing another item instead.",
    )
    target_zero_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="The share of generated groups without reward spread that p is adapted "
        "toward, a third of it for all-solved groups (p_easy) and two thirds for all-failed "
        "ones (p_hard), as GRESO splits it: a failed item is likelier to become learnable.",
    )
    p_min: float = Field(
        0.01,
        ge=0,
        le=1,
        description="The least probability that an item is still generated however long its "
        "streak: these probes estimate the false-skip rate (`sampling/false_skip_rate`).",
    )
    p_start: float = Field(
        0.5, gt=0, le=1, description="p_easy and p_hard at the start of a run (GRESO's 0.5)."
    )
    p_step: float = Field(
        0.01,
        gt=0,
        le=1,
        description="How far p_easy and p_hard move after each round of groups: down while "
        "their kind's share is at or above its target, up while below (kept in [`p_min`, 1]).",
    )
    max_draws: int = Field(
        10,
        ge=1,
        description="Candidates drawn at most for one place in a batch; when all are skipped "
        "the last is generated anyway (`sampling/skip_exhausted`), so a batch is never short.",
    )
    key: SkipKey = Field(
        "item",
        description="What the outcome history is kept by: `item` (each item's own), or "
        "`difficulty` (the environment's `difficulty_key(item)`, e.g. a reasoning-gym task and "
        "its settings, for generated tasks whose items rarely repeat; the item where an "
        "environment has none).",
    )


class CurriculumConfig(Strict):
    """Which items each environment practises (one `CurriculumScheduler` per environment).

    `frontier`, and `competence_based` with `competence: platanios`, read the score as a success
    rate, which a reward is not in general (partial credit, penalties, KL): with `score: reward`
    they need `reward_range`. Only the ranks of the scores matter to the other strategies.
    """

    strategy: StrategyName = Field(
        "uniform",
        description="How items are drawn through difficulty bins: `uniform`; `easy_first` "
        "(favours easy bins, annealed to uniform by the end of training); `competence_based` "
        "(see `competence`); `frontier` (items weighted by learnability p(1−p), so items every "
        "rollout solves or fails, whose groups have zero advantage, are rarely drawn).",
    )
    competence: CompetenceName = Field(
        "platanios",
        description="How `competence_based` picks bins: `platanios` (the easiest fraction c of "
        "the items, c the larger of the square-root schedule and the measured share at or "
        "above `competence_threshold`) or `gaussian` (Atropos's: a Gaussian over bins centred "
        "at progress·(K−1), ignoring `competence_threshold`; the Python class's default, see "
        "`docs/migrating.md`).",
    )
    n_bins: int = Field(
        5, ge=1, description="Difficulty bins, exact quantiles of the items' scores."
    )
    temperature: float = Field(
        1.0,
        description="Reshapes the distribution over bins to p^(1/temperature), renormalised: "
        "below 1 sharper, above 1 flatter.",
    )
    ema_alpha: float = Field(
        0.3,
        description="Weight of an item's newest score in its moving average, "
        "alpha · score + (1 − alpha) · average (clipped to [0, 1]).",
    )
    competence_threshold: float = Field(
        0.5,
        description="`competence_based` with `platanios`: an item whose average score is at "
        "least this counts as mastered.",
    )
    unseen_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Share of draws that go to never-scored items; `null`: the share they "
        "would get as average items.",
    )
    score: Literal["success", "reward"] = Field(
        "success",
        description="What updates an item's difficulty estimate: `success` (a rate in [0, 1]) "
        "or the raw `reward`.",
    )
    reward_range: tuple[float, float] | None = Field(
        None,
        description="`[lo, hi]`, the bounds of every reward: with `score: reward`, rewards "
        "are mapped onto [0, 1] by (r − lo)/(hi − lo), and a reward outside stops the run. "
        "Needed by `frontier` and `competence_based` (`platanios`) with `score: reward`, which "
        "read scores as success rates.",
    )
    skip: SkipConfig = Field(
        default_factory=SkipConfig,
        description="Skipping before rollout, on top of the strategy and the mixture.",
    )

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
    """Online normalisation of each environment's rewards before group advantages
    (`honed.rewards.normalizer.RewardNormalizer`, which takes these keys as its arguments)."""

    mode: NormMode = Field(
        "none",
        description="Per environment: `zscore` (r − mean) / std, `minmax` (r − min) / "
        "(max − min), over the rewards seen so far, or `none`.",
    )
    clip: float | None = Field(
        5.0,
        ge=0,
        description="After normalising, clip to ±`clip`; `0` or `null`: no clipping.",
    )
    warmup: int = Field(
        10,
        ge=0,
        description="Rewards (samples, not steps) seen before normalising starts; until "
        "then rewards are only clipped.",
    )
    eps: float = Field(
        1e-8,
        ge=0,
        description="Added to the spread (std, or max − min) before dividing; a spread below "
        "it maps every reward to 0 (`zscore`) or 0.5 (`minmax`).",
    )


class EvalConfig(Strict):
    """Held-out evaluation: before GRPO (after any warm-start), every `every` steps, and at the end."""

    split: Split = Field(
        "test",
        description="The held-out split evaluated (`initial_eval` and `final_eval` in "
        "`summary.json`).",
    )
    num_items: int | None = Field(
        200, ge=1, description="Items per environment; `null`: the whole split."
    )
    temperature: float = Field(0.0, ge=0, description="Sampling temperature; 0 is greedy decoding.")
    samples: int = Field(
        1,
        ge=1,
        description="Completions per item (k). With k > 1 every metric is the mean over all k "
        "(`accuracy` is avg@k), and `pass@j` for j = 1, 2, 4, ... and k is the expected best "
        "success among j of an item's k completions (unbiased; for 0/1 success the pass@j of "
        "Chen et al., 2021). Needs `temperature` > 0.",
    )
    every: int = Field(
        0, ge=0, description="Also evaluate every N steps; 0: only before and after training."
    )
    few_shot: int = Field(
        0,
        ge=0,
        description="k > 0: before training, also evaluate the starting policy with k solved "
        "train examples before each prompt (earlier user/assistant turns under a chat "
        "template), the prompting baseline shown beside the trained model; in `summary.json` "
        "as `initial_eval_few_shot`, in the metrics as `eval_<k>_shot/*` at step 0. "
        "Single-turn environments only.",
    )

    @model_validator(mode="after")
    def _samples_can_differ(self) -> EvalConfig:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                f"eval.samples: {self.samples} needs eval.temperature > 0: greedy decoding "
                "gives one completion k times"
            )
        return self


class CheckpointConfig(Strict):
    """When checkpoints are written and how many stay."""

    every: int = Field(
        50,
        ge=0,
        description="Write a checkpoint every N steps, and always at the end and when the run "
        "stops; 0: only then.",
    )
    keep_last: int = Field(2, ge=1, description="How many of the latest checkpoints are kept.")
    keep_best: str | None = Field(
        None,
        description="An evaluation metric (`accuracy`, `reward`, `pass@4`, `<env>/accuracy`, "
        "...; higher is better): after each evaluation during training (`eval.every`, and the "
        "final one) that beats every earlier one, that step's checkpoint is also kept as "
        "`checkpoints/best`, never pruned, with `best.json` naming the step and the value; "
        "`null`: none kept.",
    )


class LoggingConfig(Strict):
    """Where metrics go beyond `metrics.jsonl`, and what is kept for reading (both loops)."""

    tensorboard: bool = Field(
        False,
        description="Also send the metrics to TensorBoard (`pip install 'honed[tracking]'`).",
    )
    wandb: bool = Field(
        False,
        description="Also send the metrics to Weights & Biases (`pip install "
        "'honed[tracking]'`); offline unless `WANDB_MODE=online`.",
    )
    wandb_project: str = Field("honed", description="The W&B project.")
    mlflow: bool = Field(
        False, description="Also send the metrics to MLflow (`pip install 'honed[tracking]'`)."
    )
    samples_per_step: int = Field(
        4,
        ge=0,
        description="GRPO only: rows per step in `samples.jsonl` (the skill loop writes every "
        "answer to its steps' `rollouts.json`).",
    )
    progress: bool = Field(
        True, description="Progress bar and tables on the terminal (`--quiet` hides them too)."
    )
    rollouts_per_step: int = Field(
        4,
        ge=0,
        description="GRPO only: groups per step kept in `rollouts/` for `honed view`; 0: none "
        "(`honed view` shows a skill step's answers from its `rollouts.json`).",
    )
    rollouts_max_bytes: int = Field(
        262_144,
        ge=16_384,
        description="GRPO only: cap on each `rollouts/step_N.json`: long texts are cut (head "
        "and tail kept), then trailing groups left out, and the file says so.",
    )


def _one_or_a_list(schema: dict[str, Any]) -> None:
    """A list field that also takes one item (a `mode="before"` validator wraps it): its JSON
    schema says so, so that editors accept what the config accepts."""
    items = schema.pop("items")
    del schema["type"]
    schema["anyOf"] = [items, {"type": "array", "items": items}]


class ServerConfig(Strict):
    """OpenAI-compatible inference servers (vLLM, SGLang) that generate the rollouts.

    The learner sends token ids and asks for sampled token ids and log-probs, so every server
    must serve the policy's tokenizer.
    """

    base_url: list[Endpoint] = Field(
        description="One server URL or a list (`http://host:8000/v1`); rows are spread over "
        "them in turn.",
        json_schema_extra=_one_or_a_list,
    )
    model: str = Field(min_length=1, description="The model name the servers serve.")
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding the servers' key (never the key "
        "itself); `null`: no key.",
    )
    timeout_s: float = Field(300.0, gt=0, description="Seconds each request may take.")
    max_retries: int = Field(4, ge=0, description="Retries of a failed request.")
    concurrency: int = Field(64, ge=1, description="Requests in flight per server.")
    weight_sync: str = Field(
        "reload",
        description="How new weights reach the servers: `reload` (save the policy under "
        '`weights_dir` and POST `{"model_path": <dir>}` to `reload_endpoint`), `lora` (with '
        "`policy.lora`: save the adapter, load it into vLLM with `POST /v1/load_lora_adapter`, "
        "sample under its name, unload the previous one), `none` (leave the served weights "
        "alone), or your own hook as `module:Class`.",
    )
    reload_endpoint: Endpoint | str = Field(
        "/update_weights_from_disk",
        description="Where `reload` is requested: a path on each server (SGLang's "
        "`/update_weights_from_disk`) or a whole URL, held to the same rule for keys as "
        "`base_url`.",
    )
    weights_dir: str | None = Field(
        None,
        description="Where weights are saved for the servers, a path every server can read; "
        "`null`: `<run_dir>/server_weights`.",
    )
    allow_insecure_http: bool = Field(
        False,
        description="A key is sent over https://, or plain http:// to this machine only, "
        "unless this is set (a network of your own).",
    )

    @model_validator(mode="after")
    def _key_only_over_https(self) -> ServerConfig:
        for url in self.urls():
            problem = url.key_refusal(self.api_key_env, self.allow_insecure_http)
            if problem:
                raise ValueError(problem)
        return self

    @field_validator("base_url", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        urls = [value] if isinstance(value, str) else value
        if not urls:
            raise ValueError("give at least one server URL")
        return urls

    @field_validator("reload_endpoint", mode="before")
    @classmethod
    def _reload_endpoint(cls, value: Any) -> Any:
        """A path (`/...`) stays a path; anything else must be a whole URL (`Endpoint`)."""
        if isinstance(value, str) and not isinstance(value, Endpoint) and value.startswith("/"):
            # the path of an endpoint on the server's origin: parsed as one, so that it holds
            # nothing that would change which host is reached
            return Endpoint.parse("http://localhost" + value).path or "/"
        return Endpoint.parse(value) if isinstance(value, str) else value

    def reload_url(self, base_url: Endpoint) -> Endpoint:
        """Where a server at `base_url` is asked to reload: `reload_endpoint` on its origin,
        or `reload_endpoint` itself when it is a whole URL."""
        if isinstance(self.reload_endpoint, Endpoint):
            return self.reload_endpoint
        return base_url.with_path(self.reload_endpoint)

    def urls(self) -> list[Endpoint]:
        """Every URL the learner sends a request to (with the key, if there is one)."""
        reload = (
            [self.reload_url(url) for url in self.base_url] if self.weight_sync == "reload" else []
        )
        return [*self.base_url, *reload]

    @field_validator("weight_sync")
    @classmethod
    def _weight_sync(cls, value: str, info: ValidationInfo) -> str:
        return named_or_import(value, info)


class DistributedConfig(Strict):
    """Where rollouts are generated. The learner alone owns the sampler and optimizer."""

    backend: Literal["inprocess", "ray", "server", "atropos"] = Field(
        "inprocess",
        description="Where rollouts run: `inprocess` (in the learner), `ray` (on Ray actors; "
        "with a `server` section, they generate through the servers), `server` "
        "(OpenAI-compatible inference servers) or `atropos` (Atropos environments post scored "
        "groups to the trajectory API at `api_url`, honed pulls and trains on them; README, "
        '"Train behind Atropos").',
    )
    api_url: Endpoint | None = Field(
        None,
        description="`backend: atropos`: the Atropos trajectory API (`run-api`), "
        "`http://127.0.0.1:8000`.",
    )
    batch_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="`backend: atropos`: seconds to wait for a batch of groups before the run "
        "stops, saying the environments sent none.",
    )
    num_rollout_workers: int = Field(2, ge=1, description="Ray actors that roll out.")
    address: str = Field(
        "local",
        description="The Ray cluster: `local` (this machine, or the Ray instance this process "
        "started), `auto` (the cluster of `ray start`), `ray://host:port` (Ray Client).",
    )
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs each Ray actor reserves.")
    max_worker_restarts: int = Field(
        3, ge=0, description="Dead Ray workers replaced before the run stops."
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="Optimizer steps rollouts may run ahead of the learner; 0: synchronous. "
        "Off-policy tokens are reweighted by min(π_old / μ, `trainer.importance_sampling_cap`).",
    )
    server: ServerConfig | None = Field(
        None,
        description="The inference servers, for `backend: server` (or `ray`), or with `backend: "
        "atropos` the server the environments sample from, which gets the new weights after "
        "every step; `null`: none.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DistributedConfig:
        if self.address not in ("local", "auto") and not self.address.startswith("ray://"):
            raise ValueError(
                f"address must be local, auto or ray://host:port, not {self.address!r}"
            )
        if self.backend == "server" and self.server is None:
            raise ValueError("backend 'server' needs a 'server' section (base_url, model)")
        if self.backend == "inprocess" and self.server is not None:
            raise ValueError("a 'server' section needs backend 'server' (or 'ray', 'atropos')")
        if (self.backend == "atropos") != (self.api_url is not None):
            raise ValueError("backend 'atropos' and api_url (the trajectory API) go together")
        if self.backend == "atropos" and self.max_staleness:
            raise ValueError(
                "backend 'atropos' pulls what the environments have generated: how far they run "
                "ahead is their max_batches_offpolicy; leave max_staleness at 0"
            )
        return self


class Config(Strict):
    """A GRPO run (`honed train CONFIG`)."""

    seed: int = Field(
        0,
        description="Drives Python's, NumPy's and torch's RNGs, the item draws and every "
        "rollout's seed (as in TRL, whose default is 42).",
    )
    run_dir: str | None = Field(
        None,
        description="Where the run is written; `null`: `runs/<config file name>`. `--run-dir` "
        "wins.",
    )
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads for torch; `null`: torch's default, one per core. On a "
        "machine shared with other jobs, keep the total at or below the core count: two "
        "2-thread runs on 2 cores made a GRPO step about 10× slower, as each thread waits for "
        "the other's descheduled one.",
    )
    policy: PolicyConfig = Field(
        PolicyConfig(), description="The trained model: its source, device, dtype and adapters."
    )
    envs: list[EnvConfig] = Field(
        default_factory=lambda: [EnvConfig(name="addition")],
        description="The environments, one section each (`envs[]`); every batch mixes them by "
        "`weight` and `min_share`.",
    )
    trainer: TrainerConfig = Field(
        TrainerConfig(),
        description="The GRPO loop: steps, optimizer, sampling and the objective. Keys are "
        "named as in TRL's `GRPOConfig` where the meaning is the same; several defaults are "
        'honed\'s own ("Where honed differs from TRL").',
    )
    sft: SFTConfig = Field(
        SFTConfig(),
        description="Supervised warm-start on the environments' reference solutions before "
        "GRPO; off unless `sft.steps` > 0.",
    )
    curriculum: CurriculumConfig = Field(
        CurriculumConfig(),
        description="Which items each environment practises: one curriculum per environment "
        '("Curriculum and reward normalisation").',
    )
    reward_norm: RewardNormConfig = Field(
        RewardNormConfig(),
        description="Online normalisation of each environment's rewards before group "
        "advantages. Off by default: an affine map is undone by per-group scaling "
        "(`trainer.scale_rewards: group`), so it changes training only with "
        "`scale_rewards: batch` or `none`, or through `clip`.",
    )
    eval: EvalConfig = Field(
        EvalConfig(),
        description="Held-out evaluation: before GRPO (after any warm-start), every "
        "`eval.every` steps, and at the end.",
    )
    checkpoint: CheckpointConfig = Field(
        CheckpointConfig(),
        description="Checkpoints (`--resume` continues from the latest): how often, how many kept.",
    )
    logging: LoggingConfig = Field(
        LoggingConfig(),
        description="Metric sinks beyond `metrics.jsonl` (always written), samples and "
        "rollouts kept for reading, the progress display.",
    )
    distributed: DistributedConfig = Field(
        DistributedConfig(),
        description="Where rollouts are generated: in the learner, on Ray actors, or on "
        'OpenAI-compatible inference servers (README, "Scale out").',
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        """Keys that moved to another section still load under their old place (`MOVED_KEYS`),
        with a deprecation warning."""
        return moved_keys(data)

    @model_validator(mode="after")
    def _envs(self) -> Config:
        check_envs(self.envs)
        return self


# --------------------------------------------------------------------------- loading

ModelT = TypeVar("ModelT", bound=BaseModel)


def _parse_value(text: str) -> Any:
    """`-o k=v` values are YAML scalars or flow collections: `20`, `true`, `[1, 2]`, `a/b`
    (read as data, like a config file: `honed.yaml_data`); what is not YAML is the text."""
    try:
        return load_yaml(text, "an override")
    except HonedError:
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


# Keys that moved to another section of a GRPO config (old dotted key -> new one); the old place
# still loads, with a warning.
MOVED_KEYS = {"distributed.importance_sampling_cap": "trainer.importance_sampling_cap"}


def moved_keys(data: Any, warn: bool = True) -> Any:
    """A whole config `data` with each key of `MOVED_KEYS` found at its old place moved to the
    new one, and one `warn_renamed` per key moved (none with `warn=False`, for a
    run's own saved config). Giving both places is fine when they agree and an error when they
    do not: which value was meant is not known. Anything but a mapping passes through."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for old, new in MOVED_KEYS.items():
        old_section, old_key = old.split(".")
        new_section, new_key = new.split(".")
        source = out.get(old_section)
        if not isinstance(source, Mapping) or old_key not in source:
            continue
        target = out.get(new_section)
        if isinstance(target, BaseModel):
            target = target.model_dump(exclude_unset=True)
        target = dict(target) if isinstance(target, Mapping) else {}
        value = source[old_key]
        if new_key in target and target[new_key] != value:
            raise ValueError(
                f"'{old}' is the old place of '{new}' and both are given, with different values "
                f"({value!r} and {target[new_key]!r}); keep '{new}'"
            )
        if warn:
            warn_renamed(f"config key '{old}'", f"'{new}'", stacklevel=2)
        target[new_key] = value
        out[old_section] = {k: v for k, v in source.items() if k != old_key}
        out[new_section] = target
    return out


def load_model(
    model: type[ModelT],
    path: str | Path | None,
    overrides: list[str] | None = None,
    transform: Callable[[dict[str, Any]], None] | None = None,
    read: Callable[[Path], str] | None = None,
) -> ModelT:
    """Read a YAML file (or start from defaults when `path` is None), apply `-o` overrides and
    validate the result as `model`; every problem is a one-line `HonedError`.

    Shared by every command that takes a config (`honed train`, `honed skills train`, ...).
    The YAML is read as data (`honed.yaml_data`); a module the config names to import is looked
    for in the config file's directory when it is not installed (`honed.user_code`).
    `transform` edits the raw data before the overrides (`honed.runs.trust` removes key names
    from a run directory's own config with it); `read` reads the file's text instead of a plain
    open (`honed.runs.trust` reads a run's config without following a link).
    """
    data: dict[str, Any] = {}
    source = "config"
    if path is not None:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise HonedError(f"config file not found: {path}")
        loaded = read_yaml(path) if read is None else load_yaml(read(path), str(path))
        if loaded is not None and not isinstance(loaded, dict):
            raise HonedError(f"{path}: the top level must be a mapping of sections")
        data = loaded or {}
    if transform is not None:
        transform(data)
    for assignment in overrides or []:
        apply_override(data, assignment)
    context = {CONFIG_DIR: path.resolve().parent if path is not None else None}
    try:
        return model.model_validate(data, context=context)
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
