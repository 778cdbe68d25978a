"""``ddp-lint.run`` from the editor with the real runner (2 ranks on CPU over gloo)."""
from __future__ import annotations

import pytest
from lsp_helpers import wait_publish
from lsprotocol import types as t

from tests.conftest import require_torch  # the shared CI-aware helper

pytestmark = pytest.mark.asyncio

SCRIPT = """\
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("boom on rank one")
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
"""


async def test_run_command_with_the_real_runner(lsp_session):
    require_torch()
    s = await lsp_session("vscode", init_options={"run": {"nproc": 2, "timeoutSeconds": 5, "emulate": "off"}})
    uri = s.open("boom.py", SCRIPT)
    await wait_publish(s.client, uri, 1)
    n = len(s.client.publishes)
    res = await s.client.workspace_execute_command_async(t.ExecuteCommandParams(command="ddp-lint.run", arguments=[uri]))
    assert res["findings"] >= 1 and res["cancelled"] is False, res
    p = await wait_publish(s.client, uri, after=n, pred=lambda p: any(d.source == "ddp-lint (runtime)" for d in p.diagnostics))
    rt = [d for d in p.diagnostics if d.source == "ddp-lint (runtime)"]
    d = next(d for d in rt if d.code == "DDP901")
    assert d.range.start.line == 5 and "ValueError" in d.message and "boom on rank one" in d.message
    assert d.severity == t.DiagnosticSeverity.Error
    # progress went from begin to end
    (reports,) = s.client.progress_reports.values()
    assert reports[0].kind == "begin" and reports[-1].kind == "end"
