"""Project hygiene (issue 30, point 8): a changelog with entries for what exists, a contributing guide
that points at suites that exist."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_changelog_has_an_unreleased_section_and_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)[1]
    assert "## Unreleased" in text
    assert re.search(rf"^## {re.escape(version)}\b", text, re.M), f"no section for version {version}"
    # every rule family and every command that exists has an entry
    for word in ("DDP0", "DDP1", "DDP2", "DDP3", "DDP5", "DDP6", "DDP701", "explain", "run", "merge",
                 "notebook", "Security"):
        assert word in text, f"CHANGELOG.md says nothing about {word}"


def test_contributing_names_suites_that_exist():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for path in ("tests/metamorphic", "bench/realbugs", "bench/"):
        assert path in text, f"CONTRIBUTING.md does not mention {path}"
        assert (ROOT / path).exists(), f"{path} named in CONTRIBUTING.md does not exist"
