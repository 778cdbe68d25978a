"""Hover: a rule's documentation over its code in a ``# noqa: DDPxxx`` comment."""
from __future__ import annotations

from lsprotocol import types as t

from ..analysis.model import Position, Range
from ..analysis.noqa import _CODE_RE, NOQA_RE
from ..analysis.registry import get_rule


class HoverMixin:
    """The hover part of ``DdpServer`` (it needs ``docs`` and ``encoding``)."""

    def hover(self, params: t.HoverParams):
        st = self.docs.get(params.text_document.uri)
        if st is None:
            return None
        doc = st.doc
        line = doc.line(params.position.line)
        if "#" not in line:
            return None
        m = NOQA_RE.search(line)
        if m is None or m.group("codes") is None:
            return None
        col = doc.to_cp(params.position, self.encoding).column
        base = m.start("codes")
        for cm in _CODE_RE.finditer(m.group("codes")):
            s, e = base + cm.start(), base + cm.end()
            if s <= col <= e:
                rule = get_rule(cm.group(0))
                if rule is None:
                    text = f"`{cm.group(0).upper()}` is not a ddp-lint rule code."
                else:
                    text = rule.render_docs() + f"\n[Documentation]({rule.url()})\n"
                rng = doc.range_to_client(Range(Position(params.position.line, s),
                                                Position(params.position.line, e)), self.encoding)
                return t.Hover(contents=t.MarkupContent(kind=t.MarkupKind.Markdown, value=text), range=rng)
        return None
