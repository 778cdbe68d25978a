"""workspace/executeCommand: argument validation, the run command (with a stand-in runner and
with the real one), progress and cancellation, and errors that must not kill the server."""
from __future__ import annotations

import asyncio
import json
import sys

import pytest
from lsp_helpers import HERE, rng, seed_text, wait_publish
from tests.conftest import scaled
from lsprotocol import types as t
from pygls.exceptions import JsonRpcException

pytestmark = pytest.mark.asyncio


async def execute(s, command, *args):
    return await s.client.workspace_execute_command_async(t.ExecuteCommandParams(command=command, arguments=list(args)))


async def test_run_command_refuses_bad_arguments(lsp_session, tmp_path):
    s = await lsp_session("vscode")
    script = tmp_path / "ok.py"
    script.write_text("import torch.distributed as dist\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "notes.txt").write_text("hi")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.py"
    outside.write_text("print(1)\n")
    try:
        cases = [
            ((), "exactly one argument"),
            ((42,), "URI as a string"),
            (({"nope": 1},), "URI as a string"),
            (("untitled:Untitled-1",), "not a file: URI"),
            (("https://example.com/x.py",), "not a file: URI"),
            (("file://otherhost/x.py",), "remote host"),
            ((script.as_uri().replace("/ok.py", "/sub/../ok.py"),), "'..'"),
            (((tmp_path / "sub").as_uri(),), "is not a file"),
            (((tmp_path / "missing.py").as_uri(),), "does not exist"),
            (((tmp_path / "notes.txt").as_uri(),), "not a Python file"),
            ((outside.as_uri(),), "neither inside a workspace folder nor an open document"),
            ((script.as_uri(), "extra"), "exactly one argument"),
        ]
        for args, msg in cases:
            with pytest.raises(JsonRpcException) as ei:
                await execute(s, "ddp-lint.run", *args)
            assert ei.value.code == -32602, (args, ei.value)
            assert msg in ei.value.message, (args, ei.value.message)
        with pytest.raises(JsonRpcException) as ei:
            await execute(s, "ddp-lint.fixAll", "file:///nowhere/x.py")
        assert "not an open document" in ei.value.message
        # the server is still fine
        uri = s.open("seed2.py", seed_text())
        p = await wait_publish(s.client, uri, 1)
        assert any(d.code == "DDP001" for d in p.diagnostics)
    finally:
        outside.unlink()


async def test_run_publishes_runtime_diagnostics_with_progress(lsp_session, tmp_path):
    log = tmp_path / "runs.jsonl"
    s = await lsp_session("vscode", command=[sys.executable, str(HERE / "fake_runtime.py")],
                          init_options={"run": {"nproc": 2, "timeoutSeconds": 7, "args": ["--epochs", "1"]}},
                          env={"FAKE_RUN_MODE": "findings", "FAKE_RUN_LOG": str(log)})
    text = seed_text()
    uri = s.open("seed2.py", text)
    helper_uri = s.uri("helper.py")
    (tmp_path / "helper.py").write_text("def f():\n    raise ValueError('bad value')\n")
    await wait_publish(s.client, uri, 1)
    n = len(s.client.publishes)
    res = await execute(s, "ddp-lint.run", uri)
    assert res["findings"] == 2 and res["emulated"] is True and res["cancelled"] is False
    (call,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert call["script"] == str(tmp_path / "seed2.py") and call["nproc"] == 2 and call["timeout"] == 7
    assert call["script_args"] == ["--epochs", "1"] and call["cwd"] == str(tmp_path)
    # progress: begin (cancellable), the runner's steps, end
    (reports,) = s.client.progress_reports.values()
    assert reports[0].kind == "begin" and reports[0].cancellable is True
    msgs = [r.message for r in reports if r.kind == "report"]
    assert msgs[:3] == ["starting 2 ranks", "ranks up", "waiting"] and "collecting" in msgs
    assert reports[-1].kind == "end"
    # the script: static and runtime diagnostics in one publish, told apart by their source
    p = await wait_publish(s.client, uri, after=n, pred=lambda p: any(d.source == "ddp-lint (runtime)" for d in p.diagnostics))
    static = [d for d in p.diagnostics if d.source == "ddp-lint"]
    (rt,) = [d for d in p.diagnostics if d.source == "ddp-lint (runtime)"]
    assert {"DDP001", "DDP101"} <= {d.code for d in static}
    assert rt.code == "DDP905" and rt.range.start.line == 32 and "(emulated on CPU)" in rt.message
    assert rt.related_information[0].location.range.start.line == 27
    # a file the run pointed into that is not open gets its own publish
    hp = await wait_publish(s.client, helper_uri, after=n)
    (hd,) = hp.diagnostics
    assert hd.code == "DDP901" and hd.range.start.line == 1 and hd.source == "ddp-lint (runtime)"
    assert "(emulated on CPU)" in hd.message and "rank 1" in hd.message
    (rel,) = hd.related_information  # a related location in another file (the script)
    assert rel.location.uri == uri and rel.location.range.start.line == 32 and "rank 0" in rel.message

    # editing elsewhere keeps the runtime finding (moved with its line); editing its line drops it
    n = len(s.client.publishes)
    v = s.change(uri, [(rng(0, 0), "# top\n")])
    p = await wait_publish(s.client, uri, v, after=n)
    (rt,) = [d for d in p.diagnostics if d.source == "ddp-lint (runtime)"]
    assert rt.range.start.line == 33
    v = s.change(uri, [(rng(33, 4, 33, 8), "dist")])
    p = await wait_publish(s.client, uri, v)
    assert not [d for d in p.diagnostics if d.source == "ddp-lint (runtime)"]
    assert {"DDP001", "DDP101"} <= {d.code for d in p.diagnostics}

    # the next run replaces the previous run's results everywhere
    n = len(s.client.publishes)
    await execute(s, "ddp-lint.run", uri)
    await wait_publish(s.client, helper_uri, after=n)
    assert len([d for d in s.client.diagnostics[helper_uri]]) == 1


async def test_run_can_be_cancelled_and_runner_errors_are_lsp_errors(lsp_session, tmp_path):
    s = await lsp_session("vscode", command=[sys.executable, str(HERE / "fake_runtime.py")],
                          env={"FAKE_RUN_MODE": "wait"})
    uri = s.open("seed2.py", seed_text())
    await wait_publish(s.client, uri, 1)
    task = asyncio.ensure_future(execute(s, "ddp-lint.run", uri))
    for _ in range(400):
        if s.client.progress_reports:
            break
        await asyncio.sleep(0.05)
    (token,) = s.client.progress_reports
    # a second run of the same file while the first is live is refused
    with pytest.raises(JsonRpcException) as ei:
        await execute(s, "ddp-lint.run", uri)
    assert "already running" in ei.value.message
    s.client.window_work_done_progress_cancel(t.WorkDoneProgressCancelParams(token=token))
    res = await asyncio.wait_for(task, scaled(30))
    assert res["cancelled"] is True
    assert s.client.progress_reports[token][-1].kind == "end"


async def test_internal_error_is_an_lsp_error_and_the_server_survives(lsp_session, tmp_path):
    s = await lsp_session("vscode", command=[sys.executable, str(HERE / "fake_runtime.py")],
                          env={"FAKE_RUN_MODE": "boom"})
    uri = s.open("seed2.py", seed_text())
    await wait_publish(s.client, uri, 1)
    with pytest.raises(JsonRpcException) as ei:
        await execute(s, "ddp-lint.run", uri)
    assert "internal error" in ei.value.message and "runner bug" in ei.value.message
    assert any("runner bug" in m.message and m.type == t.MessageType.Error for m in s.client.log_messages)
    # still serving
    v = s.change(uri, [(rng(0, 0), "#\n")])
    await wait_publish(s.client, uri, v)
    h = await s.client.text_document_hover_async(t.HoverParams(
        text_document=t.TextDocumentIdentifier(uri=uri), position=t.Position(line=0, character=0)))
    assert h is None


@pytest.mark.parametrize("refresh", [False, True], ids=["pull-no-refresh", "pull-with-refresh"])
async def test_run_results_reach_a_pull_client(lsp_session, tmp_path, refresh):
    from lsp_helpers import caps

    c = caps("neovim-0.11")
    if refresh:
        c.workspace.diagnostics = t.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    s = await lsp_session(c, command=[sys.executable, str(HERE / "fake_runtime.py")], env={"FAKE_RUN_MODE": "findings"})
    assert s.init.capabilities.diagnostic_provider is not None
    uri = s.open("seed2.py", seed_text())
    (tmp_path / "helper.py").write_text("def f():\n    raise ValueError('bad value')\n")

    async def pull():
        return await s.client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
            text_document=t.TextDocumentIdentifier(uri=uri)))

    before = await pull()
    await execute(s, "ddp-lint.run", uri)
    after = await pull()
    static = sorted(d.code for d in before.items)
    assert sorted(d.code for d in after.items if d.source == "ddp-lint") == static
    if refresh:
        # one list per document: the pulled report has both, and the client was asked to re-pull
        assert s.client.diagnostic_refresh_count >= 1
        assert [d.code for d in after.items if d.source == "ddp-lint (runtime)"] == ["DDP905"]
        assert s.client.publishes == []
    else:
        # no way to make this client re-pull: runtime results are pushed, static ones pulled, apart
        assert not [d for d in after.items if d.source == "ddp-lint (runtime)"]
        p = await wait_publish(s.client, uri)
        assert [(d.code, d.source) for d in p.diagnostics] == [("DDP905", "ddp-lint (runtime)")]
        hp = await wait_publish(s.client, s.uri("helper.py"))
        assert [d.code for d in hp.diagnostics] == ["DDP901"]


async def test_sigterm_during_a_run_cancels_it(lsp_session, tmp_path):
    import signal

    log = tmp_path / "runs.jsonl"
    s = await lsp_session("vscode", command=[sys.executable, str(HERE / "fake_runtime.py")],
                          env={"FAKE_RUN_MODE": "wait", "FAKE_RUN_LOG": str(log)})
    uri = s.open("seed2.py", seed_text())
    await wait_publish(s.client, uri, 1)
    task = asyncio.ensure_future(execute(s, "ddp-lint.run", uri))

    def runner_started():  # the runner's own progress messages: it is running in its thread
        return any(r.kind == "report" for rs in s.client.progress_reports.values() for r in rs)

    for _ in range(400):
        if runner_started():
            break
        await asyncio.sleep(0.05)
    assert runner_started()
    proc = s.client._server
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.wait(), 15)
    task.cancel()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert {"cancelled": True} in lines  # the runner saw the cancel before the server exited
