"""Every documentation link ddp-lint hands out names a page that exists (issue 17, item 12).

The links are finding URLs (CLI JSON, ``ddp-lint rule``), SARIF ``helpUri``/``informationUri``, the
LSP ``codeDescription.href``, the hover's link and the runtime findings' URLs. They are all built
from one constant (``ddp_lint.analysis.urls``); each is mapped back to a repository path
(``<REPOSITORY_URL>/blob/<ref>/docs/rules/DDP001.md`` -> ``docs/rules/DDP001.md``) and that file
must exist in this checkout. The VS Code extension's manifest names the same repository.
"""
from __future__ import annotations

import json
import re

import pytest
from ddp_lint.analysis import urls
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.output import to_sarif
from ddp_lint.analysis.registry import all_rules

from tests.conftest import EXAMPLES, ROOT


def page(url: str | None) -> str:
    assert url, "no URL"
    path = urls.repository_path(url)
    assert path is not None, f"{url} does not point into {urls.BLOB_BASE_URL}"
    assert (ROOT / path).is_file(), f"{url} names {path}, which does not exist"
    return path


def test_url_maps_back_to_the_repository_path():
    assert urls.rule_docs_url("DDP001") == f"{urls.REPOSITORY_URL}/blob/{urls.DOCS_REF}/docs/rules/DDP001.md"
    assert urls.repository_path(urls.rule_docs_url("DDP001")) == "docs/rules/DDP001.md"
    assert urls.repository_path(urls.rule_docs_url("DDP001") + "#why-is-this-bad") == "docs/rules/DDP001.md"
    assert urls.repository_path("https://example.com/docs/rules/DDP001.md") is None


def test_every_rule_page_exists_at_the_path_its_url_names():
    rules = all_rules()
    assert len(rules) >= 20
    for code, rule in rules.items():
        assert page(rule.url()) == f"{urls.RULE_DOCS_DIR}/{code}.md"


def test_runtime_codes_have_pages():
    runtime = [code for code in all_rules() if code.startswith("DDP9")]
    assert {"DDP901", "DDP902", "DDP903", "DDP904", "DDP905"} <= set(runtime), runtime
    for code in runtime:
        assert page(urls.rule_docs_url(code)) == f"docs/rules/{code}.md"


SOURCES = sorted([*EXAMPLES.glob("*.py"), *(ROOT / "tests" / "fixtures").rglob("*.py")])


@pytest.mark.parametrize("path", SOURCES[:200], ids=lambda p: str(p.relative_to(ROOT)))
def test_finding_sarif_and_lsp_links_exist(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    findings = check_source(text, str(path), codes=frozenset(all_rules())).findings
    for f in findings:
        page(f.url)
    sarif = to_sarif(findings)
    driver = sarif["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == urls.REPOSITORY_URL
    for rule in driver["rules"]:
        page(rule["helpUri"])
    if findings:
        from ddp_lint.lsp_server.convert import to_diagnostic
        from ddp_lint.lsp_server.documents import UTF16, Document
        doc = Document(path.as_uri(), text, 1)
        for f in findings:
            d = to_diagnostic(f, doc, UTF16)
            page(d.code_description.href)


def test_syntax_error_link_exists():
    err = check_source("def f(:\n", "bad.py", gate=False).syntax_error  # whatever the text gate says
    assert err is not None and err.code == "DDP000"
    page(err.url)


def test_no_other_module_names_the_repository():
    """One constant: no other source file spells a URL into the project's repository."""
    host = urls.REPOSITORY_URL.split("://", 1)[1]
    offenders = []
    for folder in ("analysis", "lsp_server", "ddp_lint", "vscode-client/src"):
        for f in (ROOT / folder).rglob("*"):
            if f.suffix in (".py", ".ts") and f.name != "urls.py" and host in f.read_text(encoding="utf-8"):
                offenders.append(str(f.relative_to(ROOT)))
    assert not offenders, offenders


def test_extension_manifest_names_the_same_repository():
    manifest = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))
    assert manifest["repository"]["url"] in (urls.REPOSITORY_URL, urls.REPOSITORY_URL + ".git")
    assert manifest["bugs"]["url"].startswith(urls.REPOSITORY_URL + "/")
    assert manifest["homepage"].startswith(urls.REPOSITORY_URL)


def test_markdown_links_to_rule_pages_exist():
    """Relative links from the docs to rule pages (docs/rules/README.md, README.md) resolve."""
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", md.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (md.parent / target).resolve().is_file(), f"{md.relative_to(ROOT)} links to missing {target}"


def test_raw_urls_map_too():
    assert urls.repository_path(f"{urls.RAW_BASE_URL}docs/img/vscode-run.png") == "docs/img/vscode-run.png"
