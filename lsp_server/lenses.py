"""Code lenses (setting ``codeLens``, off unless the client turns it on; the VS Code extension
does by default): "Run with N ranks (emulated)" and "Run with torchrun" above a script's entry
points (``analysis.entry_points``: the ``if __name__ == "__main__":`` block, the function passed
to ``mp.spawn``), both running ``ddp-lint.run`` with options; and "Explain a failed job…" at the
top of the file when the server has the ``ddp-lint.explain`` command."""
from __future__ import annotations

import asyncio

from lsprotocol import types as t

from ..analysis.entry_points import entry_points

from .code_actions import _IMPORTS_DIST
from .commands import EXPLAIN_COMMAND, RUN_COMMAND
from .state import is_python


class CodeLensMixin:
    """The code-lens half of ``DdpServer`` (it needs ``docs``, ``settings``, ``trusted``,
    ``gpus``, ``executor`` and ``notebook_of``)."""

    def command_names(self) -> set[str]:
        try:
            return set(self.protocol.fm.commands)
        except AttributeError:
            return set()

    async def code_lenses(self, params: t.CodeLensParams) -> list[t.CodeLens]:
        if not self.settings.code_lens or not self.settings.enable or not self.trusted:
            return []
        st = self.docs.get(params.text_document.uri)
        if st is None or self.notebook_of(st) is not None:
            return []
        doc = st.doc
        if not doc.path or not is_python(doc) or not _IMPORTS_DIST.search(doc.text):
            return []
        uri, text, path = doc.uri, doc.text, doc.path
        loop = asyncio.get_running_loop()
        eps = await loop.run_in_executor(self.executor, entry_points, text, path)
        n = self.settings.run.nproc or (self.gpus if self.gpus and self.gpus >= 2 else 2)
        out: list[t.CodeLens] = []
        for ep in eps:
            where = t.Range(start=t.Position(line=ep.line, character=0), end=t.Position(line=ep.line, character=0))
            out.append(t.CodeLens(range=where, command=t.Command(
                title=f"▶ Run with {n} ranks (emulated)", command=RUN_COMMAND,
                arguments=[{"uri": uri, "nproc": n, "emulate": "on"}])))
            out.append(t.CodeLens(range=where, command=t.Command(
                title="▶ Run with torchrun", command=RUN_COMMAND,
                arguments=[{"uri": uri, "emulate": self.settings.run.emulate}])))
        if eps and EXPLAIN_COMMAND in self.command_names():
            top = t.Range(start=t.Position(line=0, character=0), end=t.Position(line=0, character=0))
            # no argument: the client asks for the folder of the job's artefacts (VS Code's
            # ddp-lint.explain opens a folder picker), which only the user can name
            out.append(t.CodeLens(range=top, command=t.Command(
                title="Explain a failed job…", command=EXPLAIN_COMMAND)))
        return out
