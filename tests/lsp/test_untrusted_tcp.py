"""Issue 29, R2: a server on TCP without ``--allow-run`` (any local user may be its client) analyses
only the documents the client sent; cross-file analysis reads nothing from disk, so the findings
never leak the content of a file the client did not send (function bodies, lines, collectives).

The client is pytest-lsp's, talking to the real server in TCP mode through ``tcp_relay.py``."""
from __future__ import annotations

import sys

import pytest
from lsp_helpers import HERE, wait_publish
from lsprotocol import types as t

pytestmark = pytest.mark.asyncio

# on disk, never opened by the client: mode 0600, as another user's private helper would be
SECRET = ("import torch.distributed as dist\n"
          "\n"
          "\n"
          "def sync_value(t):\n"
          "    dist.all_reduce(t)  # the collective the findings must not reveal\n")
TRAIN = ("import torch\n"
         "import torch.distributed as dist\n"
         "from secret_helper import sync_value\n"
         "\n"
         "\n"
         "def main():\n"
         "    dist.init_process_group('gloo')\n"
         "    t = torch.ones(1)\n"
         "    if dist.get_rank() == 0:\n"
         "        sync_value(t)\n"
         "\n"
         "\n"
         "main()\n")


def _leaks(p) -> list[str]:
    """What the published diagnostics say about the helper's content."""
    out = []
    for d in p.diagnostics:
        texts = [d.message] + [f"{r.location.uri} {r.message}" for r in d.related_information or ()]
        out += [x for x in texts if "all_reduce" in x or "secret_helper" in x]
    return out


def _workspace(root):
    helper = root / "secret_helper.py"
    helper.write_text(SECRET)
    helper.chmod(0o600)
    return helper


@pytest.mark.timeout(120)
async def test_untrusted_tcp_server_reads_no_file_the_client_did_not_send(lsp_session, tmp_path):
    _workspace(tmp_path)
    s = await lsp_session("vscode", command=[sys.executable, str(HERE / "tcp_relay.py")])
    uri = s.open("train.py", TRAIN)
    p = await wait_publish(s.client, uri, 1)
    assert not _leaks(p), _leaks(p)
    assert not [d for d in p.diagnostics if d.code == "DDP104"], p.diagnostics
    # the same helper sent by the client as a document: now it is the client's own text
    n = len(s.client.publishes)
    s.client.text_document_did_open(t.DidOpenTextDocumentParams(text_document=t.TextDocumentItem(
        uri=(tmp_path / "secret_helper.py").as_uri(), language_id="python", version=1, text=SECRET)))
    p = await wait_publish(s.client, uri, after=n, pred=lambda q: any(d.code == "DDP104" for d in q.diagnostics))
    assert any("all_reduce" in d.message for d in p.diagnostics if d.code == "DDP104")


@pytest.mark.timeout(120)
async def test_trusted_stdio_server_follows_the_import_on_disk(lsp_session, tmp_path):
    """The control: on stdio the same session finds the hang through the helper on disk (so the
    test above would see a leak if there were one)."""
    _workspace(tmp_path)
    s = await lsp_session("vscode")
    uri = s.open("train.py", TRAIN)
    p = await wait_publish(s.client, uri, 1)
    assert _leaks(p) and any(d.code == "DDP104" for d in p.diagnostics), p.diagnostics
