"""A reward function with the TRL signature: every data column arrives as a keyword list."""


def exact(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion, stripped of surrounding whitespace, is the answer."""
    return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]
