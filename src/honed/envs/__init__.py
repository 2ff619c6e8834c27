"""Environments: what an agent practises and how an attempt is scored.

The `Environment` protocol and single-turn helper (`base.py`), the registry that builds them by name
or `module:Class` (`registry.py`), the embedded tasks (`tasks/`), user datasets (`dataset.py`,
`qa.py`) and the Mem-alpha memory agent (`memory/`).
"""
