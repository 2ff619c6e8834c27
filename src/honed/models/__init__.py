"""Models: the policies trained by the GRPO loop and the chat clients the skill loop calls."""
