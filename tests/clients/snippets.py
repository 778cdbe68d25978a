"""Configuration snippets copied verbatim out of docs/editors.md, so that the client tests run
exactly what the docs tell users to paste. A snippet is the fenced block right after an HTML
comment ``<!-- ddp-lint-snippet: NAME -->``."""
from __future__ import annotations

import re

from tests.conftest import ROOT

DOCS = ROOT / "docs" / "editors.md"
_SNIPPET = re.compile(r"<!-- ddp-lint-snippet: (?P<name>[^>]+?) -->\n```[a-z]*\n(?P<body>.*?)\n```", re.DOTALL)


def snippets() -> dict[str, str]:
    """{name: code} of every marked snippet in docs/editors.md."""
    found: dict[str, str] = {}
    for m in _SNIPPET.finditer(DOCS.read_text(encoding="utf-8")):
        assert m["name"] not in found, f"two snippets named {m['name']!r} in {DOCS}"
        found[m["name"]] = m["body"] + "\n"
    return found


def snippet(name: str) -> str:
    got = snippets()
    assert name in got, f"no snippet {name!r} in {DOCS} (found {sorted(got)})"
    return got[name]
