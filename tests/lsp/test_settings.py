"""Settings: initializationOptions, workspace/configuration, didChangeConfiguration,
[tool.ddp-lint] in pyproject.toml, lint-on-save, bad values."""
from __future__ import annotations

import asyncio

import pytest
from lsp_helpers import rng, seed_text, wait_publish
from lsprotocol import types as t

pytestmark = pytest.mark.asyncio
FOCUS = {"DDP001", "DDP101"}


def focus(p):
    return {d.code: d for d in p.diagnostics if d.code in FOCUS}


async def test_settings_from_init_configuration_and_changes(lsp_session):
    s = await lsp_session("vscode", init_options={"settings": {"ignore": ["DDP101"]}},
                          configuration={"ddp-lint": {"severity": {"DDP001": "warning"}, "debounceMs": 50}})
    uri = s.open("seed2.py", seed_text())
    # initializationOptions (ignore) and workspace/configuration (severity) both apply
    p = await wait_publish(s.client, uri, pred=lambda p: "DDP001" in focus(p)
                           and focus(p)["DDP001"].severity == t.DiagnosticSeverity.Warning)
    assert set(focus(p)) == {"DDP001"}
    # the server registered for configuration changes (VS Code needs that)
    assert any(r.method == t.WORKSPACE_DID_CHANGE_CONFIGURATION for r in s.client.registrations)

    # didChangeConfiguration with the settings in the notification (keys it does not name keep
    # their earlier value, so the init option's ignore is cleared explicitly)
    n = len(s.client.publishes)
    s.client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
        settings={"ddp-lint": {"ignore": [], "select": ["DDP101"], "severity": {"DDP101": "hint"}}}))
    p = await wait_publish(s.client, uri, after=n)
    assert set(focus(p)) == {"DDP101"} and focus(p)["DDP101"].severity == t.DiagnosticSeverity.Hint

    # didChangeConfiguration without settings: the server asks workspace/configuration again
    s.client.set_configuration({"enable": False}, section="ddp-lint")
    n = len(s.client.publishes)
    s.client.workspace_did_change_configuration(t.DidChangeConfigurationParams(settings=None))
    p = await wait_publish(s.client, uri, after=n)
    assert list(p.diagnostics) == []


async def test_pyproject_tool_table_applies(lsp_session, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nignore = ["DDP001"]\n')
    s = await lsp_session("neovim")
    uri = s.open("seed2.py", seed_text())
    p = await wait_publish(s.client, uri, 1)
    assert set(focus(p)) == {"DDP101"}
    # the editor's select overrides the project's, its ignore adds to it
    n = len(s.client.publishes)
    s.client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
        settings={"ddp-lint": {"select": ["DDP001", "DDP101"]}}))
    p = await wait_publish(s.client, uri, after=n)
    assert set(focus(p)) == {"DDP101"}  # select replaces the default set; the project still ignores DDP001
    # a broken pyproject is reported, and linting goes on with the defaults
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nselect = ["NOPE"]\n')
    n = len(s.client.publishes)
    s.client.workspace_did_change_watched_files(t.DidChangeWatchedFilesParams(changes=[
        t.FileEvent(uri=(tmp_path / "pyproject.toml").as_uri(), type=t.FileChangeType.Changed)]))
    p = await wait_publish(s.client, uri, after=n)
    assert set(focus(p)) == {"DDP001", "DDP101"}
    assert any("NOPE" in m.message and m.type == t.MessageType.Error for m in s.client.messages)


async def test_ddp_lint_toml_discovered_with_ruffs_precedence(lsp_session, tmp_path):
    """Issue 30, point 2: the server reads .ddp-lint.toml / ddp-lint.toml as the CLI does, ahead of
    pyproject.toml in the same folder, and a change to one re-lints."""
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nignore = ["DDP101"]\n')
    (tmp_path / "ddp-lint.toml").write_text('ignore = ["DDP001"]\n')
    s = await lsp_session("neovim")
    uri = s.open("seed2.py", seed_text())
    p = await wait_publish(s.client, uri, 1)
    assert set(focus(p)) == {"DDP101"}  # ddp-lint.toml wins over pyproject.toml
    # .ddp-lint.toml wins over ddp-lint.toml; the watched-file change makes the server read it
    (tmp_path / ".ddp-lint.toml").write_text('ignore = ["DDP101"]\n')
    n = len(s.client.publishes)
    s.client.workspace_did_change_watched_files(t.DidChangeWatchedFilesParams(changes=[
        t.FileEvent(uri=(tmp_path / ".ddp-lint.toml").as_uri(), type=t.FileChangeType.Created)]))
    p = await wait_publish(s.client, uri, after=n)
    assert set(focus(p)) == {"DDP001"}


async def test_lint_on_save_only(lsp_session):
    s = await lsp_session("vscode", init_options={"lintOnChange": False, "logLevel": "debug"})
    text = seed_text()
    uri = s.open("seed2.py", text)
    p = await wait_publish(s.client, uri, 1)
    assert set(focus(p)) == FOCUS
    line = text.splitlines()[31]
    a = line.index("[None")
    n_log = len(s.client.log_messages)
    v = s.change(uri, [(rng(31, a, 31, len(line)), "[None for _ in range(dist.get_world_size())]")])
    await asyncio.sleep(0.6)  # several debounce periods: nothing is analysed until the save
    assert not [m for m in s.client.log_messages[n_log:] if m.message.startswith("analysed ")]
    n = len(s.client.publishes)
    s.client.text_document_did_save(t.DidSaveTextDocumentParams(text_document=t.TextDocumentIdentifier(uri=uri)))
    p = await wait_publish(s.client, uri, v, after=n, pred=lambda p: "DDP101" not in focus(p))
    assert set(focus(p)) == {"DDP001"}


async def test_bad_settings_are_reported_and_ignored(lsp_session):
    s = await lsp_session("emacs", init_options={"select": ["DDP9999"], "debounceMs": "soon",
                                                 "run": {"nproc": 0.5}, "colour": "blue"})
    uri = s.open("seed2.py", seed_text())
    p = await wait_publish(s.client, uri, 1)
    assert set(focus(p)) == FOCUS  # defaults kept for every bad key
    (m,) = [m for m in s.client.messages if m.type == t.MessageType.Warning]
    for key in ("ddp-lint.select", "ddp-lint.debounceMs", "ddp-lint.run.nproc", "ddp-lint.colour"):
        assert key in m.message, m.message
