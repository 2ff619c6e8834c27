"""Multi-turn episodes in training: advantages and the loss on a hand-computed two-turn example,
the server path (token ids in and out across turns), rollout workers, and a run that resumes in
the middle bit for bit."""

from __future__ import annotations

import json
import math

import pytest
import torch
from openai_server import FakeOpenAIServer
from tiny_run import SMALL_MODEL, small_config, write_config
from tool_world import PRICES, hermes, write_data

from honed.cli import main
from honed.config import PolicyConfig, ServerConfig, TinyModelConfig, TrainerConfig
from honed.distributed.server import CompletionsGenerator
from honed.distributed.worker import RolloutWorker, ShardTask
from honed.envs.tools import ToolEnv
from honed.models.batching import make_batch
from honed.models.policy import Policy, PolicySampler, SamplingParams
from honed.models.scoring import score
from honed.rl.prepare import prepare
from honed.rl.schedule import build_lr_scheduler
from honed.rl.trainer import GRPOTrainer
from honed.rl.update import PolicyUpdate
from honed.runs.rundir import RunDir
from honed.types import Group, Segment, Trajectory


def test_two_turn_advantages_and_loss_by_hand():
    """Two episodes of one item: A (reward 1) called a tool, read the result and answered; B
    (reward 0) answered at once. GRPO gives A +a and B -a on every token the model wrote, none
    on the tool result; with dapo the loss is the mean over the 7 model tokens:
    L = -(a * Σ_A log π + (-a) * Σ_B log π) / 7."""
    policy = Policy.from_config(PolicyConfig(tiny=TinyModelConfig(**SMALL_MODEL)), seed=0)
    prompt = [1, 40, 81]
    a_ids, a_mask = [50, 51, 2, 60, 61, 62, 52, 2], [1, 1, 1, 0, 0, 0, 1, 1]  # turn, tool, turn
    b_ids, b_mask = [53, 2], [1, 1]
    group = Group(
        "tools",
        "k",
        [
            Trajectory([Segment(prompt, a_ids, [0.0] * 8, a_mask)], reward=1.0),
            Trajectory([Segment(prompt, b_ids, [0.0] * 2, b_mask)], reward=0.0),
        ],
    )
    settings = TrainerConfig(loss_type="dapo", scale_rewards="group", max_grad_norm=None)
    sequences = prepare([group], settings).sequences
    a = 0.5 / (math.sqrt(0.5) + 1e-4)  # (r - mean) / (std + eps), std of [1, 0] is √0.5
    assert [s.advantage for s in sequences] == pytest.approx([a, -a])
    assert [s.mask for s in sequences] == [a_mask, b_mask]

    # The hand-written objective's gradient ...
    model = policy.model
    batch = make_batch([prompt, prompt], [a_ids, b_ids], [a_mask, b_mask], policy.pad_id)
    logp = score(model, batch).logprobs
    by_hand = -(a * logp[0, [0, 1, 2, 6, 7]].sum() - a * logp[1, :2].sum()) / 7
    model.zero_grad()
    by_hand.backward()
    expected = {n: -p.grad.clone() for n, p in model.named_parameters()}  # one SGD step, lr 1
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # ... is the step honed takes (plain SGD with learning rate 1 shows the gradient itself).
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    update = PolicyUpdate(
        policy, optimizer, build_lr_scheduler(optimizer, "constant", 0, 1), settings
    )
    stats = update.step(sequences)
    assert stats["tokens/trained"] == 7
    for name, param in model.named_parameters():
        delta = param.detach() - before[name]
        assert torch.allclose(delta, expected[name], atol=1e-6, rtol=1e-4), name


def _rows(n: int) -> list[dict]:
    names = sorted(PRICES)
    rows = []
    for i in range(n):
        name = names[i % len(names)]
        rows.append(
            {
                "prompt": f"price of {name}? ({i})",
                "answer": str(PRICES[name]),
                "reference": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"function": {"name": "lookup", "arguments": {"name": name}}}
                        ],
                    },
                    {"role": "assistant", "content": str(PRICES[name])},
                ],
            }
        )
    return rows


def test_the_server_path_sends_each_turn_as_the_exact_ids_so_far(tmp_path):
    """Against an OpenAI-compatible completions endpoint honed sends token ids (never the chat
    API, never the server's tool parser) and gets sampled ids and log-probs back; each turn's
    prompt is the previous prompt, the sampled ids and the template's bridge, exactly."""
    policy = Policy.from_config(
        PolicyConfig(tiny=TinyModelConfig(**SMALL_MODEL), chat_template=True), 0
    )
    tokenizer = policy.tokenizer

    def completions(req):
        text = tokenizer.decode(req.body["prompt"], skip_special_tokens=False)
        reply = hermes("lookup", name="ab") if "R:" not in text else "12"
        ids = [*tokenizer(reply, add_special_tokens=False)["input_ids"], policy.end_id]
        choice = {
            "token_ids": ids,
            "logprobs": {"token_logprobs": [-0.25] * len(ids)},
            "finish_reason": "stop",
        }
        return {"choices": [choice], "usage": {"completion_tokens": len(ids)}}

    env = ToolEnv(
        "shop",
        path=str(write_data(tmp_path / "d.jsonl", _rows(1))),
        tools=["tool_world:lookup"],
        reward="tool_world:correct",
        test_fraction=0.0,
    )
    with FakeOpenAIServer(routes={"/v1/completions": completions}) as server:
        config = ServerConfig(base_url=server.base_url, model="fake-model")
        generator = CompletionsGenerator(config, policy, SamplingParams(1.0, 1.0, 100))
        trajectory = env.rollout(env.items("train"), generator, 1, 0)[0].trajectories[0]
        sent = [r.body for r in server.requests if r.path == "/v1/completions"]
        generator.close()
    segment = trajectory.segments[0]
    assert trajectory.success == 1.0 and len(sent) == 2
    assert not any("tools" in body or "messages" in body for body in sent)
    first_turn = segment.completion_ids[: segment.mask().index(0)]
    bridge = [i for i, m in zip(segment.completion_ids, segment.mask(), strict=True) if not m]
    assert sent[1]["prompt"] == [*sent[0]["prompt"], *first_turn, *bridge]
    assert [lp for lp, m in zip(segment.logprobs, segment.mask(), strict=True) if m] == [
        -0.25
    ] * sum(segment.mask())


def _config_data(tmp_path, steps: int = 4) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = write_data(tmp_path / "data.jsonl", _rows(24))
    return {
        "seed": 0,
        "policy": {
            "model": "tiny",
            "tiny": {**SMALL_MODEL, "max_position_embeddings": 256},
            "chat_template": True,
        },
        "envs": [
            {
                "name": "shop",
                "type": "tools",
                "args": {
                    "path": str(data),
                    "tools": ["tool_world:lookup", "tool_world:calc"],
                    "reward": ["tool_world:correct", "tool_world:used_tools"],
                    "reward_weights": [1.0, 0.5],
                    "reference_field": "reference",
                    "max_turns": 3,
                    "test_fraction": 0.25,
                },
            }
        ],
        "sft": {"steps": 100, "batch_size": 8, "learning_rate": 1e-2},
        "trainer": {
            "max_steps": steps,
            "prompts_per_step": 3,
            "num_generations": 4,
            "learning_rate": 1e-3,
            "max_completion_length": 80,
            "max_grad_norm": None,
        },
        "eval": {"num_items": 4},
        "checkpoint": {"every": 2, "keep_last": 5},
        "logging": {"progress": False, "samples_per_step": 3},
        "run_dir": str(tmp_path / "run"),
    }


def test_rollout_workers_build_the_tools_env_and_roll_out_what_the_learner_does(tmp_path):
    data = _config_data(tmp_path)
    config = small_config(tmp_path, data=data)
    worker = RolloutWorker(config.model_dump(mode="json"), 0)
    trainer = GRPOTrainer(config, RunDir(tmp_path / "run"))
    items = trainer.envs["shop"].items("train")[:2]
    local = trainer.envs["shop"].rollout(
        items, PolicySampler(worker.policy, worker.generator.params), 4, 7
    )
    remote = worker.rollout(ShardTask(0, 0, [0, 1], items, 7)).pairs
    for (group, _), mine in zip(remote, local, strict=True):
        assert [t.segments[0].completion_ids for t in group.trajectories] == [
            t.segments[0].completion_ids for t in mine.trajectories
        ]


def _metric_rows(run: RunDir) -> list[dict]:
    return [
        # wall-clock fields (perf/*, the row's time, tools' mean_seconds) differ between any runs
        {
            k: v
            for k, v in r.items()
            if not k.startswith(("perf/", "time")) and not k.endswith("mean_seconds")
        }
        for r in run.read_jsonl(run.metrics_path)
        if "reward/mean" in r
    ]


def test_a_multi_turn_run_resumed_in_the_middle_ends_bit_for_bit_as_the_straight_one(tmp_path):
    straight = GRPOTrainer(
        small_config(tmp_path / "a", data=_config_data(tmp_path / "a")), RunDir(tmp_path / "a/run")
    )
    straight.train()
    first = GRPOTrainer(
        small_config(tmp_path / "b", "trainer.max_steps=2", data=_config_data(tmp_path / "b")),
        RunDir(tmp_path / "b/run"),
    )
    first.train()
    resumed = GRPOTrainer(
        small_config(tmp_path / "b", data=_config_data(tmp_path / "b")), RunDir(tmp_path / "b/run")
    )
    resumed.train(resume=True)
    rows_a, rows_b = _metric_rows(straight.run), _metric_rows(resumed.run)
    assert rows_a == rows_b and len(rows_a) == 4
    assert sum(r["groups/trained"] for r in rows_a) > 0
    # the run really was multi-turn: episodes called tools and read the results
    assert max(r["episodes/shop/turns"] for r in rows_a) > 1
    assert sum(r.get("tools/lookup/calls", 0) for r in rows_a) > 0
    for key, value in straight.policy.model.state_dict().items():
        assert torch.equal(value, resumed.policy.model.state_dict()[key]), key
    samples = [
        json.dumps(r, sort_keys=True) for r in resumed.run.read_jsonl(resumed.run.samples_path)
    ]
    assert samples == [
        json.dumps(r, sort_keys=True) for r in straight.run.read_jsonl(straight.run.samples_path)
    ]


def test_train_and_eval_from_the_command_line_report_tool_use(tmp_path):
    data = _config_data(tmp_path, steps=2)
    data["envs"][0]["args"]["baselines"] = {"always 12": "tool_world:always_12"}
    config = write_config(tmp_path, data)
    assert main(["train", str(config), "--quiet"]) == 0
    run = RunDir(tmp_path / "run")
    summary = run.read_summary()
    for key in ("episodes/shop/turns", "episodes/shop/used_tools", "tools/lookup/calls"):
        assert key in summary["initial_eval"] and key in summary["final_eval"]
    assert main(["eval", str(run.path), "--config", str(config), "--split", "test", "--quiet"]) == 0
    (result,) = (run.path / "eval").glob("*_test.json")
    report = json.loads(result.read_text())
    agents = [row["agent"] for row in report["reports"]["shop"]["rows"]]
    assert agents[:2] == ["reference solver", "rule: always 12"]
    assert any(a.endswith("tools disabled") for a in agents) and len(agents) == 6
    assert report["reports"]["shop"]["rows"][0]["accuracy"] == 1.0
