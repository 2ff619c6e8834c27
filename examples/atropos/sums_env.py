"""An Atropos environment for the README's "Train behind Atropos": two-digit sums asked in
words, the quickstart's task, written as Atropos users write environments (`BaseEnv`).

It samples from `honed serve` as it would from SGLang (atroposlib's `ManagedServer` keeps the
sampled token ids and log-probs), scores each reply with honed's arithmetic scorer (1 when the
last number of the reply is the sum) and posts the group to the trajectory API, where `honed
train examples/atropos.yaml` pulls it. Items are drawn by honed's `CurriculumScheduler`, whose
state goes into the environment's Atropos checkpoint, beside honed's checkpoints.

    python examples/atropos/sums_env.py serve      # after run-api and honed serve are up
"""

from __future__ import annotations

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig

from honed.envs.tasks.arithmetic import ArithmeticEnv
from honed.models.sources import resolve_model
from honed.sampling.curriculum import CurriculumScheduler

MODEL = "smollm2-135m-instruct"  # what `honed serve` serves, under this name
SERVER = "http://127.0.0.1:30000/v1"  # `honed serve ... --port 30000`
API = "http://127.0.0.1:8000"  # `run-api --port 8000`


class SumsEnv(BaseEnv):
    name = "sums"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # local data: the training split of honed's arithmetic task (no hub)
        self.task = ArithmeticEnv("sums", seed=0, op="+", levels=[2], train_size=500)
        self.items = {item.key: item for item in self.task.items("train")}
        self.curriculum = CurriculumScheduler("uniform", seed=0)
        self.curriculum.register_items(self.items)

    @classmethod
    def config_init(cls) -> tuple[BaseEnvConfig, list[APIServerConfig]]:
        tokenizer = str(resolve_model(MODEL))  # the model's folder in honed's cache
        env = BaseEnvConfig(
            tokenizer_name=tokenizer,
            group_size=8,
            use_wandb=False,
            rollout_server_url=API,
            max_token_length=256,
            total_steps=-1,  # as many as the trainer registers
            steps_per_eval=1_000_000,
            max_batches_offpolicy=1,
            wandb_name=cls.name,
        )
        server = APIServerConfig(
            server_type="sglang",  # token ids and log-probs through /generate
            base_url=SERVER,
            model_name=MODEL,
            tokenizer_name=tokenizer,
            api_key="unused",
        )
        return env, [server]

    async def setup(self) -> None:
        pass

    async def evaluate(self, *args, **kwargs) -> None:
        pass  # honed evaluates the task's held-out split itself

    async def get_next_item(self) -> str:
        return self.curriculum.sample_item(self.curr_step, max(1, self.config.total_steps))

    async def collect_trajectories(self, key: str):
        item = self.items[key]
        messages = [{"role": "user", "content": self.task.prompt(item)}]
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            reply = await managed.chat_completion(
                messages=messages, n=self.config.group_size, max_tokens=16, temperature=1.0
            )
            nodes = managed.get_state()["nodes"]
        answers = [choice.message.content or "" for choice in reply.choices]
        scores = [self.task.score(item, answer).reward for answer in answers]
        self.curriculum.update_batch(key, scores)
        group = {
            "tokens": [node.tokens for node in nodes],
            "masks": [node.masked_tokens for node in nodes],
            "scores": scores,
            "inference_logprobs": [node.logprobs for node in nodes],
        }
        return group, []

    def save_checkpoint(self, step, data=None) -> None:
        super().save_checkpoint(step, {"curriculum": self.curriculum.state_dict()})

    def load_checkpoint(self) -> None:
        super().load_checkpoint()  # sets self.curriculum to the saved state (a dict)
        if isinstance(self.curriculum, dict):
            state, self.curriculum = self.curriculum, CurriculumScheduler("uniform", seed=0)
            self.curriculum.load_state_dict(state)


if __name__ == "__main__":
    SumsEnv.cli()
