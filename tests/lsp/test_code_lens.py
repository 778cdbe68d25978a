"""Code lenses: "Run with N ranks (emulated)" / "Run with torchrun" above entry points, "Explain a
failed job…" only where the server has ddp-lint.explain; off unless the client turns them on."""
from __future__ import annotations

import sys

import pytest
from lsp_helpers import HERE
from lsprotocol import types as t

pytestmark = pytest.mark.asyncio

SCRIPT = '''import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
'''


async def lenses(s, uri):
    return await s.client.text_document_code_lens_async(t.CodeLensParams(
        text_document=t.TextDocumentIdentifier(uri=uri))) or []


async def test_off_unless_turned_on(lsp_session):
    s = await lsp_session("vscode")
    assert s.init.capabilities.code_lens_provider is not None
    uri = s.open("train.py", SCRIPT)
    assert await lenses(s, uri) == []


@pytest.mark.parametrize("client", ["vscode", "neovim"])
async def test_run_lenses_above_entry_points(lsp_session, client):
    s = await lsp_session(client, init_options={"codeLens": True, "run": {"nproc": 3}})
    uri = s.open("train.py", SCRIPT)
    got = await lenses(s, uri)
    by_line: dict[int, list] = {}
    for lens in got:
        if lens.command.command != "ddp-lint.run":
            continue
        by_line.setdefault(lens.range.start.line, []).append(lens.command)
    assert sorted(by_line) == [4, 8]  # `def train` (the spawn target) and the __main__ block
    for cmds in by_line.values():
        titles = [c.title for c in cmds]
        assert titles == ["▶ Run with 3 ranks (emulated)", "▶ Run with torchrun"]
        assert all(c.command == "ddp-lint.run" for c in cmds)
        assert list(cmds[0].arguments) == [{"uri": uri, "nproc": 3, "emulate": "on"}]


async def test_no_lens_without_distributed_or_entry_point(lsp_session):
    s = await lsp_session("vscode", init_options={"codeLens": True})
    assert await lenses(s, s.open("plain.py", "if __name__ == '__main__':\n    print(1)\n")) == []
    assert await lenses(s, s.open("lib.py", "import torch.distributed as dist\n\ndef f():\n    pass\n")) == []


async def test_explain_lens_where_the_command_exists(lsp_session):
    s = await lsp_session("vscode", init_options={"codeLens": True})
    assert "ddp-lint.explain" in s.init.capabilities.execute_command_provider.commands
    uri = s.open("train.py", SCRIPT)
    explain = [lens for lens in await lenses(s, uri) if lens.command.command == "ddp-lint.explain"]
    assert len(explain) == 1 and explain[0].command.title == "Explain a failed job…"
    # no argument: the client asks for the artefacts' folder (VS Code's command opens a picker)
    assert explain[0].range.start.line == 0 and not explain[0].command.arguments


async def test_no_explain_lens_without_the_command(lsp_session):
    s = await lsp_session("vscode", init_options={"codeLens": True},
                          command=[sys.executable, str(HERE / "no_explain_server.py")])
    assert "ddp-lint.explain" not in s.init.capabilities.execute_command_provider.commands
    uri = s.open("train.py", SCRIPT)
    got = await lenses(s, uri)
    assert got and not any(lens.command.command == "ddp-lint.explain" for lens in got)


async def test_run_options_are_validated(lsp_session):
    s = await lsp_session("vscode", init_options={"codeLens": True})
    uri = s.open("train.py", SCRIPT)
    for bad in ({"uri": uri, "nproc": 0}, {"uri": uri, "emulate": "maybe"}):
        with pytest.raises(Exception) as e:
            await s.client.workspace_execute_command_async(t.ExecuteCommandParams(
                command="ddp-lint.run", arguments=[bad]))
        assert "nproc" in str(e.value) or "emulate" in str(e.value)
