"""workspace/executeCommand ``ddp-lint.explain`` (issue 27): a folder of a failed job's artefacts
(hand-made Flight Recorder dumps from a container's /workspace) becomes runtime diagnostics on the
workspace's files, kept as a run's are; bad arguments are clear errors."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lsp_helpers import rng, wait_publish
from lsprotocol import types as t
from pygls.exceptions import JsonRpcException

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.runtime.fr_fixtures import dump, entry, write  # noqa: E402

pytestmark = pytest.mark.asyncio

TRAIN = "import torch.distributed as dist\n\n\ndef step(x, rank):\n    dist.all_reduce(x)\n    if rank == 0:\n" \
        "        dist.broadcast(x, 0)\n    dist.barrier()\n"


async def execute(s, command, *args):
    return await s.client.workspace_execute_command_async(t.ExecuteCommandParams(command=command, arguments=list(args)))


def artefacts(base: Path) -> Path:
    d = base / "job-1234"
    W = "/workspace/proj"
    ar = entry("2.10", 0, 1, "all_reduce", [[4]], [(f"{W}/train.py", 5, "step")])
    bc = entry("2.10", 1, 2, "broadcast", [[4]], [(f"{W}/train.py", 7, "step")], state="scheduled")
    ba = entry("2.10", 1, 2, "barrier", [[1]], [(f"{W}/train.py", 8, "step")], state="scheduled")
    write(d, 0, dump("2.10", [ar, bc], 2))
    write(d, 1, dump("2.10", [ar, ba], 2))
    return d


async def test_explain_publishes_and_keeps_findings(lsp_session, tmp_path):
    s = await lsp_session("vscode")
    (tmp_path / "train.py").write_text(TRAIN)
    d = artefacts(tmp_path.parent / f"{tmp_path.name}-artefacts")
    uri = s.open("train.py", TRAIN)
    await wait_publish(s.client, uri, 1)
    n = len(s.client.publishes)
    res = await execute(s, "ddp-lint.explain", d.as_uri())
    assert res["findings"] == 1 and res["files"] == [uri] and len(res["ranks"]) == 2
    p = await wait_publish(s.client, uri, after=n, pred=lambda p: any(x.source == "ddp-lint (runtime)" for x in p.diagnostics))
    (rt,) = [x for x in p.diagnostics if x.source == "ddp-lint (runtime)"]
    assert rt.code == "DDP902" and rt.range.start.line == 6 and "rank" in rt.message
    assert rt.related_information[0].location.range.start.line == 7
    # an edit elsewhere keeps it (moved with its line)
    n = len(s.client.publishes)
    v = s.change(uri, [(rng(0, 0), "# top\n")])
    p = await wait_publish(s.client, uri, v, after=n)
    assert [x.range.start.line for x in p.diagnostics if x.source == "ddp-lint (runtime)"] == [7]
    # explaining the same folder again replaces its results (here: with a folder now empty of dumps)
    for f in d.iterdir():
        f.unlink()
    (d / "notes.txt").write_text("nothing here\n")
    n = len(s.client.publishes)
    res = await execute(s, "ddp-lint.explain", {"uri": d.as_uri()})
    assert res["error"] and "no Flight Recorder dump" in res["error"]
    p = await wait_publish(s.client, uri, after=n)
    assert not [x for x in p.diagnostics if x.source == "ddp-lint (runtime)"]


async def test_explain_refuses_bad_arguments(lsp_session, tmp_path):
    s = await lsp_session("vscode")
    for args, msg in [((), "exactly one argument"), ((42,), "URI as a string"),
                      (("https://example.com/x",), "not a file: URI"),
                      (("file://otherhost/x",), "remote host"),
                      (((tmp_path / "missing").as_uri(),), "does not exist"),
                      (("relative/dir",), "not an absolute path"),
                      (({"uri": tmp_path.as_uri(), "pathMap": "x"},), "pathMap must be a list")]:
        with pytest.raises(JsonRpcException) as ei:
            await execute(s, "ddp-lint.explain", *args)
        assert ei.value.code == -32602 and msg in ei.value.message, (args, ei.value.message)


async def test_explain_is_refused_where_the_server_reads_no_client_named_file(tmp_path):
    """--tcp without --allow-run (``trusted`` False): no file a client names is read."""
    from ddp_lint.lsp_server.runtime import explain_command

    class Untrusted:
        trusted = False
        untrusted_reason = "a TCP server reads no file a client names"

    d = artefacts(tmp_path)
    with pytest.raises(JsonRpcException) as ei:
        await explain_command(Untrusted(), (d.as_uri(),))
    assert ei.value.code == -32602 and "ddp-lint.explain is disabled" in ei.value.message
