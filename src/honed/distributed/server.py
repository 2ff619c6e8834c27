"""Sampling from OpenAI-compatible inference servers (vLLM, SGLang) through `/v1/completions`.

Token in, token out: the request's `prompt` is the token ids the environment built, and the
reply must carry the sampled token ids and their log-probs, because the learner trains on the
exact tokens and needs the behaviour log-probs for its importance weights. The request asks for
both the ways vLLM offers them:

- `return_token_ids: true` → `choices[i].token_ids` (vLLM ≥ 0.10.2);
- `logprobs: 1` → `choices[i].logprobs.token_logprobs`, with `return_tokens_as_token_ids: true`
  so that `choices[i].logprobs.tokens` reads `token_id:<id>` (ids from those when
  `token_ids` is absent).

A server that gives neither ids nor log-probs stops the run with a `HonedError` naming the
missing field, rather than training on re-tokenised text. Each row is one request with its own
`seed` (the rollout seed), spread over the servers in turn; servers batch concurrent requests
themselves. vLLM reports log-probs of the raw model unless started with
`--logprobs-mode processed_logprobs`: with `temperature` ≠ 1 start it that way, so that μ is the
tempered distribution honed scores against.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from honed.config import ServerConfig
from honed.errors import HonedError
from honed.models.chat import ChatClient, ChatModelConfig
from honed.models.policy import Policy, SamplingParams
from honed.types import Sample

TOKEN_PREFIX = "token_id:"


def server_clients(server_config: ServerConfig) -> list[ChatClient]:
    """One HTTP client per server (retries, concurrency limit and credentials of its own)."""
    return [
        ChatClient(
            ChatModelConfig(
                base_url=url,
                model=server_config.model,
                api_key_env=server_config.api_key_env,
                timeout_s=server_config.timeout_s,
                max_retries=server_config.max_retries,
                concurrency=server_config.concurrency,
                allow_insecure_http=server_config.allow_insecure_http,
            )
        )
        for url in server_config.base_url
    ]


def parse_choice(choice: dict[str, Any], url: str) -> tuple[list[int], list[float], bool]:
    """(sampled token ids, their log-probs, truncated) from one completions choice."""
    logprobs = choice.get("logprobs") if isinstance(choice.get("logprobs"), dict) else {}
    ids = choice.get("token_ids")
    if ids is None:
        tokens = logprobs.get("tokens") or []
        if tokens and all(isinstance(t, str) and t.startswith(TOKEN_PREFIX) for t in tokens):
            ids = [int(t[len(TOKEN_PREFIX) :]) for t in tokens]
    if ids is None:
        raise HonedError(
            f"the inference server at {url} returned no token ids for a completion (neither "
            "choices[].token_ids nor 'token_id:<id>' tokens); honed trains on the exact sampled "
            "tokens: use a server that honours return_token_ids (vLLM >= 0.10.2) or "
            "return_tokens_as_token_ids"
        )
    values = logprobs.get("token_logprobs")
    if values is None or len(values) != len(ids) or any(v is None for v in values):
        raise HonedError(
            f"the inference server at {url} returned no log-probs for the sampled tokens "
            f"(choices[].logprobs.token_logprobs: {values!r:.60} for {len(ids)} tokens); the "
            "learner needs the behaviour log-probs: use a server whose completions API "
            "honours 'logprobs'"
        )
    return (
        [int(i) for i in ids],
        [float(v) for v in values],
        choice.get("finish_reason") == "length",
    )


class CompletionsGenerator:
    """A `Generator` whose completions come from inference servers; the learner's tokenizer
    encodes prompts and decodes the sampled ids, so text and scoring match the in-process path."""

    def __init__(
        self,
        server_config: ServerConfig,
        tokenizer: Policy,
        params: SamplingParams,
        clients: list[ChatClient] | None = None,
        served: object | None = None,
    ) -> None:
        """`served`, when given, is the weight-sync hook whose `served_model` (the adapter
        the servers hold, with `weight_sync: lora`) names the model to request."""
        self.server_config = server_config
        self.served = served
        self.policy = tokenizer
        self.params = params
        self.clients = clients or server_clients(server_config)
        self.stage = "rollout"

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def encode(self, text: str) -> list[int]:
        return self.policy.encode(text)

    def generate(self, prompts: Sequence[str | list[int]], seeds: Sequence[int]) -> list[Sample]:
        if len(prompts) != len(seeds):
            raise ValueError("generate needs exactly one seed per prompt")
        ids = [self.policy.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        if not ids:
            return []
        workers = min(len(ids), self.server_config.concurrency * len(self.clients))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            rows = [pool.submit(self._sample, i, ids[i], int(seeds[i])) for i in range(len(ids))]
            return [r.result() for r in rows]

    def _sample(self, row: int, prompt_ids: list[int], seed: int) -> Sample:
        client = self.clients[row % len(self.clients)]
        url = client.config.base_url.child("completions")
        model = getattr(self.served, "served_model", None) or self.server_config.model
        body = {
            "model": model,
            "prompt": prompt_ids,
            "max_tokens": self.params.max_tokens,
            "temperature": self.params.temperature,
            "top_p": self.params.top_p,
            "seed": seed,
            "n": 1,
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "stop_token_ids": list(self.policy.stop_ids),
            "skip_special_tokens": False,
        }
        response = client.post(url, body, self.stage)
        try:
            data = response.json()
            choice = data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise HonedError(
                f"the inference server at {url} sent a reply that is not a completion: "
                f"{response.text[:200]!r}"
            ) from None
        completion, logprobs, truncated = parse_choice(choice, url)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        client.meter.add(
            self.stage, requests=1, completion_tokens=int(usage.get("completion_tokens") or 0)
        )
        ended = bool(completion) and completion[-1] in self.policy.stop_ids
        return Sample(
            prompt_ids=prompt_ids,
            completion_ids=completion,
            logprobs=logprobs,
            text=self.policy.decode(completion[:-1] if ended else completion),
            truncated=truncated,
        )
