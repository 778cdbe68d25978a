"""Plain-data findings model. No LSP types, no torch, no libcst.

Positions are 0-based lines and 0-based columns counted in Unicode code points (Python ``str``
indices). Front ends convert: the CLI to Ruff's 1-based rows/columns, the language server to the
negotiated LSP position encoding.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

TYPE_CHECKING = False  # no `typing` import at start-up (annotations are strings here)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    HINT = "hint"


class Applicability(str, enum.Enum):
    """How trustworthy a fix is, as in Ruff."""

    SAFE = "safe"  # keeps the program's meaning; applied by --fix and fix-all
    UNSAFE = "unsafe"  # may change behaviour; applied only with --unsafe-fixes / explicit action
    DISPLAY_ONLY = "display-only"  # shown to the user, never applied automatically


@dataclass(frozen=True, slots=True, order=True)
class Position:
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Range:
    start: Position
    end: Position

    @staticmethod
    def of(sl: int, sc: int, el: int, ec: int) -> "Range":
        return Range(Position(sl, sc), Position(el, ec))


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``range`` of the document with ``content`` (an insertion when the range is empty)."""

    range: Range
    content: str
    cell: int | None = None  # a notebook finding's edit: the cell its range is relative to


@dataclass(frozen=True, slots=True)
class Fix:
    applicability: Applicability
    message: str
    edits: tuple[Edit, ...]


@dataclass(frozen=True, slots=True)
class Related:
    range: Range
    message: str
    filename: str | None = None  # None: same file as the finding
    ranks: tuple[int, ...] = ()
    cell: int | None = None  # a notebook's cell (1-based, as Ruff counts); the range is inside it


@dataclass(slots=True)
class Finding:
    code: str
    name: str
    message: str
    severity: Severity
    range: Range
    filename: str = "<stdin>"
    related: tuple[Related, ...] = ()
    fix: Fix | None = None
    url: str | None = None
    # Runtime findings (DDP9xx) only:
    ranks: tuple[int, ...] = ()
    emulated: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    # A notebook finding (analysis/notebook.py): the cell (1-based over all cells, as Ruff counts);
    # the range, related locations and fix edits are then relative to their cells.
    cell: int | None = None

    @property
    def noqa_row(self) -> int:
        """0-based line on which a ``# noqa`` comment suppresses this finding."""
        return self.range.start.line

    def sort_key(self):
        return (self.filename, self.cell or 0, self.range.start, self.code)
