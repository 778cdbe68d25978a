"""Where ddp-lint's documentation lives: the one place that names the project's repository.

Every link ddp-lint hands out is built here: a finding's ``url`` (CLI JSON output, ``ddp-lint rule``),
SARIF's ``helpUri`` and ``informationUri``, the LSP ``codeDescription.href`` and the hover's
"Documentation" link. A rule's page is the file ``docs/rules/<CODE>.md`` of the repository, shown by
the forge at ``<REPOSITORY_URL>/blob/<DOCS_REF>/docs/rules/<CODE>.md``; ``tests/test_docs_links.py``
maps every URL back to that path and checks that the file exists. The VS Code extension's
``package.json`` (repository, bugs, homepage) and its README's links and images
(``vscode-client/README.md``) name the same repository (same test, and tests/test_vscode_e2e.py).

To move the project (a fork, a rename), change ``REPOSITORY_URL`` here and in package.json.
"""
from __future__ import annotations

REPOSITORY_URL = "https://github.com/ddp-lint/ddp-lint"
DOCS_REF = "main"
RULE_DOCS_DIR = "docs/rules"

# a repository path under the docs ref: f"{BLOB_BASE_URL}{path}" (a page), f"{RAW_BASE_URL}{path}" (the
# file itself, e.g. an image in the VS Code extension's README)
BLOB_BASE_URL = f"{REPOSITORY_URL}/blob/{DOCS_REF}/"
RAW_BASE_URL = f"{REPOSITORY_URL}/raw/{DOCS_REF}/"
# a rule's page: f"{RULE_DOCS_BASE_URL}{code}.md"
RULE_DOCS_BASE_URL = f"{BLOB_BASE_URL}{RULE_DOCS_DIR}/"


def rule_docs_url(code: str) -> str:
    """The documentation page of rule ``code`` (``DDP001``, ``DDP901``...)."""
    return f"{RULE_DOCS_BASE_URL}{code}.md"


def repository_path(url: str) -> str | None:
    """The repository path a docs URL names (``docs/rules/DDP001.md``), or None when the URL does
    not point into this repository's docs ref."""
    for base in (BLOB_BASE_URL, RAW_BASE_URL):
        if url.startswith(base):
            path = url[len(base):].split("#", 1)[0].split("?", 1)[0]
            return path or None
    return None
