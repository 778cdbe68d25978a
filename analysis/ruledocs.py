"""Write ``docs/rules/<CODE>.md`` (the pages the findings' URLs point at) and ``docs/rules/README.md``
from the rules' docstrings: ``python -m ddp_lint.analysis.ruledocs [FOLDER]``, and the rule index
``analysis/rules/_index.py`` (``registry.index_source``). Tests keep them in sync."""
from __future__ import annotations

import sys
from pathlib import Path

from .io import atomic_write
from .registry import all_rules


def render_index() -> str:
    lines = ["# Rules", "", "| code | name | severity | default | fix |", "|---|---|---|---|---|"]
    for code, r in all_rules().items():
        lines.append(f"| [{code}]({code}.md) | {r.name} | {r.severity.value} | "
                     f"{'on' if r.default_enabled else 'off'} | {r.fix_availability} |")
    return "\n".join(lines) + "\n"


def expected_files() -> dict[str, str]:
    files = {f"{code}.md": r.render_docs() for code, r in all_rules().items()}
    files["README.md"] = render_index()
    return files


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0] if argv else Path(__file__).resolve().parent.parent / "docs" / "rules")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in expected_files().items():
        atomic_write(str(folder / name), text.encode("utf-8"), mode=0o644)
    from .registry import index_source

    index = Path(__file__).resolve().parent / "rules" / "_index.py"
    atomic_write(str(index), index_source().encode("utf-8"), mode=0o644)
    print(f"wrote {len(expected_files())} files to {folder} and analysis/rules/_index.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
