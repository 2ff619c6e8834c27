"""The requests `honed serve` accepts, validated with pydantic, and its errors.

Requests follow OpenAI's API with vLLM's extensions (`stop_token_ids`, `return_token_ids`,
`return_tokens_as_token_ids`, `skip_special_tokens`, `include_stop_str_in_output`) and, for
`/generate`, SGLang's native format (what Atropos's SGLang client sends). Unknown fields are
ignored, as vLLM does; a known option honed cannot honour (streaming, penalties, logit bias,
forced tool calls) is refused with a 400 naming it, never silently dropped, because a client
that sets it expects what it asks for. Errors are OpenAI's JSON shape
(`{"error": {"message", "type", "param", "code"}}`) with the matching HTTP status.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Most choices one request may ask for, and most alternatives per position (vLLM's limit).
MAX_N = 128
MAX_TOP_LOGPROBS = 20


class ServeError(Exception):
    """An error the client is told about: HTTP `status` and OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def parse(model: type[BaseModel], data: Any) -> Any:
    """`data` as a `model`, or a 400 naming the first field that is wrong."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ServeError(400, f"{where}: {first['msg']}", param=where) from None


def _refuse(param: str, why: str) -> ServeError:
    return ServeError(400, f"{param}: {why}", param=param, code="unsupported")


class Sampling(BaseModel):
    """What OpenAI's completion and chat requests share."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = None
    stream: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    top_k: int | None = None
    min_p: float | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False

    def check_supported(self) -> None:
        """A 400 for each option set to something honed's sampler does not do."""
        if self.stream:
            raise _refuse("stream", "streaming is not supported; send stream: false")
        if self.presence_penalty or self.frequency_penalty:
            raise _refuse("presence_penalty", "penalties are not supported; leave them at 0")
        if self.repetition_penalty not in (None, 1.0):
            raise _refuse("repetition_penalty", "penalties are not supported; leave it at 1")
        if self.logit_bias:
            raise _refuse("logit_bias", "logit bias is not supported")
        if self.top_k not in (None, 0, -1):
            raise _refuse("top_k", "top-k sampling is not supported; use top_p")
        if self.min_p:
            raise _refuse("min_p", "min-p sampling is not supported; use top_p")
        if self.ignore_eos:
            raise _refuse("ignore_eos", "generation always stops at the end-of-turn token")

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class CompletionRequest(Sampling):
    """`POST /v1/completions`: a text prompt, a list of them, token ids or lists of them."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.echo:
            raise _refuse("echo", "echoing the prompt is not supported")
        if self.suffix:
            raise _refuse("suffix", "a suffix (fill-in-the-middle) is not supported")
        if self.best_of not in (None, self.n):
            raise _refuse("best_of", "best_of must equal n")

    def prompts(self) -> list[str | list[int]]:
        """Each prompt of the request: text, or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise ServeError(400, "prompt: must not be empty", param="prompt")
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    type: str = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        if isinstance(value, list):
            for part in value:
                if part.type != "text":
                    raise ValueError(f"content parts of type {part.type!r} are not supported")
        return value

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content)


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatRequest(Sampling):
    """`POST /v1/chat/completions`: messages rendered by the model's chat template, with
    tools when given."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    max_completion_tokens: int | None = Field(None, ge=1)
    response_format: dict[str, Any] | None = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.tool_choice not in (None, "auto", "none"):
            raise _refuse(
                "tool_choice",
                "only 'auto' and 'none' are supported (forcing a call needs guided decoding)",
            )
        if self.response_format and self.response_format.get("type", "text") != "text":
            raise _refuse("response_format", "only type 'text' is supported")
        if self.top_logprobs and not self.logprobs:
            raise _refuse("top_logprobs", "needs logprobs: true")

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def parses_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


class GenerateSampling(BaseModel):
    """SGLang's `sampling_params`."""

    model_config = ConfigDict(extra="ignore")

    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    top_k: int = -1
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    sampling_seed: int | None = None


class GenerateRequest(BaseModel):
    """`POST /generate`, SGLang's native route: text or token ids in, token ids and their
    log-probs out (`meta_info.output_token_logprobs`)."""

    model_config = ConfigDict(extra="ignore")

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    return_logprob: bool = False
    top_logprobs_num: int = Field(0, ge=0, le=MAX_TOP_LOGPROBS)
    stream: bool = False

    def check_supported(self) -> None:
        s = self.sampling_params
        if self.stream:
            raise _refuse("stream", "streaming is not supported")
        if (self.text is None) == (self.input_ids is None):
            raise ServeError(400, "give exactly one of text and input_ids", param="input_ids")
        if s.top_k not in (-1, 0) or s.min_p:
            raise _refuse("sampling_params", "top-k and min-p sampling are not supported")
        if s.presence_penalty or s.frequency_penalty or s.repetition_penalty != 1.0:
            raise _refuse("sampling_params", "penalties are not supported")
        if s.ignore_eos:
            raise _refuse("sampling_params.ignore_eos", "generation always stops at end of turn")

    def prompts(self) -> list[str | list[int]]:
        if self.text is not None:
            return [self.text] if isinstance(self.text, str) else list(self.text)
        ids = self.input_ids or []
        if ids and all(isinstance(x, int) for x in ids):
            return [list(ids)]  # type: ignore[arg-type]
        return list(ids)  # type: ignore[arg-type]

    @property
    def batched(self) -> bool:
        """Whether the request gave a list of prompts (then the reply is a list)."""
        if self.text is not None:
            return isinstance(self.text, list)
        return bool(self.input_ids) and not all(isinstance(x, int) for x in self.input_ids or [])


class ReloadRequest(BaseModel):
    """`POST /update_weights_from_disk` (SGLang's route, which honed's trainer calls)."""

    model_config = ConfigDict(extra="ignore")

    model_path: str = Field(min_length=1)
