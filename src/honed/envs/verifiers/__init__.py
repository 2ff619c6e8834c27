"""verifiers environments (`type: verifiers`), trained on unchanged: `env.py` is the environment,
`loading.py` finds verifiers and the user's `load_environment`, `episodes.py` drives verifiers'
turn methods with honed's token-exact loop, `messages.py` converts between the two formats."""

from honed.envs.verifiers.env import VerifiersEnv

__all__ = ["VerifiersEnv"]
