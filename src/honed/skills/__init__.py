"""Skill optimisation: a Markdown skill document trained by reflection under an edit budget."""

from honed.skills.document import (
    ApplyReport,
    EditOutcome,
    Region,
    SkillDocument,
    SkillFormatError,
    parse_regions,
    skill_hash,
)
from honed.skills.edits import OPS, Edit, InvalidEdit, ParsedEdits, parse_edits
from honed.skills.schedule import (
    AUTONOMOUS_BUDGET,
    MODES,
    EditBudgetScheduler,
    build_scheduler,
    clamp_autonomous,
)
from honed.skills.store import SkillStore, SkillVersion, atomic_write_text

__all__ = [
    "AUTONOMOUS_BUDGET",
    "MODES",
    "OPS",
    "ApplyReport",
    "Edit",
    "EditBudgetScheduler",
    "EditOutcome",
    "InvalidEdit",
    "ParsedEdits",
    "Region",
    "SkillDocument",
    "SkillFormatError",
    "SkillStore",
    "SkillVersion",
    "atomic_write_text",
    "build_scheduler",
    "clamp_autonomous",
    "parse_edits",
    "parse_regions",
    "skill_hash",
]
