"""The manifest of real-bug cases (bench/realbugs/manifest.jsonl), one JSON object per line:

    {"id": ..., "repo": "owner/name", "commit": fix sha, "parent": its parent sha,
     "files": [paths the fix changed that hold the bug], "changed_lines": {path: [before lines]},
     "class": short class name, "url": commit URL, "summary": the bug in one line, in our words,
     "repro": folder under tests/realbugs/cases/ that reproduces it in our own words}
"""
from __future__ import annotations

import json
from pathlib import Path

MANIFEST = Path(__file__).resolve().parent / "manifest.jsonl"
REQUIRED = ("id", "repo", "commit", "parent", "files", "class", "url")


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    cases = []
    if not path.is_file():
        return cases
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        case = json.loads(line)
        missing = [k for k in REQUIRED if k not in case]
        if missing:
            raise ValueError(f"{path}:{n}: case lacks {', '.join(missing)}")
        cases.append(case)
    return cases
