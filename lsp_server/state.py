"""Per-document state: what the server knows about one open document."""
from __future__ import annotations

import asyncio

from ..analysis.model import Finding

from .documents import Document


class DocState:
    """Everything the server knows about one open document."""

    __slots__ = ("doc", "static", "static_version", "syntax", "analyzed_version", "task", "inflight",
                 "closed", "pull_ids", "result_seq", "settings_gen", "analyses", "published_version", "deps")

    def __init__(self, doc: Document):
        self.doc = doc
        self.static: list[Finding] = []  # last good parse's findings, moved with the edits since
        self.static_version: int | None = None  # version at which ``static`` is exact (fixes valid)
        self.syntax: Finding | None = None  # DDP000 of the latest analysis, if any
        self.analyzed_version: int | None = None
        self.task: asyncio.Task | None = None
        self.inflight: asyncio.Future | None = None
        self.closed = False
        self.pull_ids: tuple[str, list] | None = None  # (resultId, diagnostics) of the last pull
        self.result_seq = 0
        self.settings_gen = -1
        self.analyses = 0
        self.published_version: int | None = None
        # project files the last analysis read (helpers it imports): when one changes, in the
        # editor or on disk, this document is analysed again
        self.deps: frozenset[str] = frozenset()

    @property
    def exact(self) -> bool:
        """True when ``static`` is the analysis of the current text (so its fixes apply)."""
        return self.static_version == self.doc.version and self.syntax is None


def is_python(doc: Document) -> bool:
    """Only Python is linted (a client may open other files with this server attached)."""
    lang = (doc.language_id or "").lower()
    if lang in ("python", "py", "python3"):
        return True
    name = (doc.path or doc.uri).lower()
    return not lang and name.endswith((".py", ".pyi", ".pyw"))
