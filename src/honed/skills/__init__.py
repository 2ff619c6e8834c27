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
    MODES,
    NO_LIMIT,
    LRScheduler,
    build_scheduler,
    clamp_autonomous,
)
from honed.skills.store import SkillStore, SkillVersion, atomic_write_text

__all__ = [
    "MODES",
    "NO_LIMIT",
    "OPS",
    "ApplyReport",
    "Edit",
    "EditOutcome",
    "InvalidEdit",
    "LRScheduler",
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
