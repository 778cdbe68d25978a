"""The server survives a long random stream of didOpen / didChange (incremental, UTF-16 ranges
through surrogate pairs, CRLF and lone CR) / didClose, code actions, fix-all and diagnostic pulls,
checked step by step against an independent model of every document's text.

After every step:
- a code action request probes one line: the "Disable DDP001 for this line" edit the server
  computes from its own copy of that line must be the one computed from the model's line;
- the diagnostics for the current version (pulled, or the push for that version) must be exactly
  what the engine finds in the model's text, in the model's UTF-16 columns; while the text does not
  parse, the one DDP000 must match and every kept diagnostic must still lie inside the document;
- every request is answered, the process is alive, and nothing was logged as an internal error.
Every few steps, each quick fix's edit applied to the model must equal the engine's own fix applied
to it, and the fix-all edit must equal ``analysis.fixes.fix_all`` on the model.

The stream is driven by a seeded PRNG (fixed under the "ci" profile, fresh under "long"); a failure
prints the seed and the last operations.
"""
from __future__ import annotations

import asyncio
import os
import random
import time

import pytest
from hypothesis import settings as hyp_settings
from lsprotocol import types as t

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.fixes import apply_edits, fix_all
from ddp_lint.analysis.model import Applicability
from ddp_lint.analysis.noqa import add_noqa_edit
from tests.fuzz.support import corpus_files, parses, read
from tests.conftest import scaled
from tests.lsp.lsp_helpers import (Model, answered, internal_errors, server_alive, start_session,
                                           stop_session, wait_publish)

pytestmark = pytest.mark.asyncio

LONG = hyp_settings.get_current_profile_name() != "ci"
STEPS = int(os.environ.get("DDP_LINT_STREAM_STEPS", 20000 if LONG else 1500))
SEED = random.randrange(1 << 30) if LONG else 20261202
SEVERITY = {"error": t.DiagnosticSeverity.Error, "warning": t.DiagnosticSeverity.Warning,
            "info": t.DiagnosticSeverity.Information, "hint": t.DiagnosticSeverity.Hint}
FIX_ALL = "source.fixAll.ddp-lint"

CORPUS = [p for p in corpus_files() if p.suffix == ".py" and ("seed_problem" in p.name or "bad_" in p.name)]
SNIPPETS = (
    "dist.all_gather_object(out, 1)\n", "out = [None] * 3\n", "torch.cuda.set_device(local_rank)\n",
    'dist.init_process_group("nccl")\n', "    ", "\t", "(", ")", "[", "]", ":", "\n", "\r\n", "\r", " ",
    "# noqa: DDP001", "  # noqa", "é", "中文", "😀", "𝔘𝔫𝔦", "👩\u200d👩\u200d👧", "\u2028", "\x0c", "'", '"""',
    "if rank == 0:\n    ", "def f(:", "import torch\nimport torch.distributed as dist\n", "x = 1\n", "\\",
)
NAMES = ("a.py", "dir with space/ü 中文.py", "b$(x)'q.py")


def random_text(rng: random.Random, model: Model) -> str:
    r = rng.random()
    if r < 0.45:
        return rng.choice(SNIPPETS)
    if r < 0.6:
        return ""
    if r < 0.8:  # a whole line from the corpus
        src = read(rng.choice(CORPUS)).split("\n")
        return rng.choice(src) + rng.choice(("\n", "\r\n", ""))
    if r < 0.9 and model.text:  # a copy of part of the document (duplicated tokens, lines)
        a = rng.randrange(len(model.text))
        return model.text[a:a + rng.randrange(1, 40)]
    return "".join(rng.choice("ab(){}[]:=,. \n\t#'\"é中😀\r") for _ in range(rng.randrange(1, 8)))


def random_offset(rng: random.Random, text: str, near: int | None = None) -> int:
    """A code-point offset that LSP can express (never between the \\r and \\n of a CRLF)."""
    for _ in range(20):
        if near is not None and rng.random() < 0.7:
            o = min(max(near + rng.randrange(-30, 30), 0), len(text))
        else:
            o = rng.randrange(len(text) + 1)
        if not (0 < o < len(text) and text[o - 1] == "\r" and text[o] == "\n"):
            return o
    return 0


def expected(model: Model, path: str, open_docs: dict | None = None):
    """The engine's answer on the model text, seeing the other open documents as the server does
    (their texts, not the disk's: a rule's cross-file gate may read them)."""
    from ddp_lint.analysis.flow import project

    docs = {os.path.abspath(p): m.text for p, m in (open_docs or {}).items()}
    for p, text in docs.items():
        project.set_overlay(p, text)
    try:
        return check_source(model.text, path, Settings())
    finally:
        for p in docs:
            project.set_overlay(p, None)


def diag_key(d: t.Diagnostic):
    r = d.range
    return (d.code, r.start.line, r.start.character, r.end.line, r.end.character, d.message, d.severity)


def finding_key(model: Model, f):
    r = model.to_client_range(f.range)
    return (f.code, r.start.line, r.start.character, r.end.line, r.end.character, f.message,
            SEVERITY[f.severity.value])


class Stream:
    def __init__(self, client, init, root, client_name: str, seed: int):
        self.client = client
        self.root = root
        self.enc = init.capabilities.position_encoding or t.PositionEncodingKind.Utf16
        self.pull = init.capabilities.diagnostic_provider is not None
        self.rng = random.Random(seed)
        self.seed = seed
        self.client_name = client_name
        self.models: dict[str, Model] = {}
        self.versions: dict[str, int] = {}
        self.paths: dict[str, str] = {}
        self.history: list[str] = []
        self.good: dict[str, str] = {}  # uri -> the last text that parsed
        self.checked = {"diagnostics": 0, "quickfix": 0, "fixall": 0, "probe": 0, "parsed": 0}

    def open_models(self) -> dict:
        """{path: model} of every open document."""
        return {self.paths[u]: m for u, m in self.models.items()}

    def note(self, s: str) -> None:
        self.history.append(s)
        del self.history[:-12]

    def fail(self, msg: str):
        ops = "\n  ".join(self.history)
        raise AssertionError(f"[{self.client_name}, seed {self.seed}] {msg}\nlast operations:\n  {ops}")

    # -- operations ----------------------------------------------------------------------------
    def open(self, name: str, text: str) -> str:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="")
        uri = path.as_uri()
        self.versions[uri] = self.versions.get(uri, 0) + 1
        self.models[uri] = Model(text, self.enc)
        self.good.pop(uri, None)
        self.paths[uri] = str(path)
        self.note(f"open {name} v{self.versions[uri]} ({len(text)} chars)")
        self.client.text_document_did_open(t.DidOpenTextDocumentParams(text_document=t.TextDocumentItem(
            uri=uri, language_id="python", version=self.versions[uri], text=text)))
        return uri

    def close(self, uri: str) -> None:
        self.note(f"close {uri.rsplit('/', 1)[-1]}")
        self.models.pop(uri)
        self.client.text_document_did_close(t.DidCloseTextDocumentParams(
            text_document=t.TextDocumentIdentifier(uri=uri)))

    def restore(self, uri: str) -> None:
        """Undo back to the last text that parsed, as one minimal incremental change (an editor's
        undo), so that the stream keeps coming back to analysable documents."""
        model = self.models[uri]
        old, new = model.text, self.good[uri]
        a = 0
        while a < min(len(old), len(new)) and old[a] == new[a]:
            a += 1
        b = 0
        while b < min(len(old), len(new)) - a and old[len(old) - 1 - b] == new[len(new) - 1 - b]:
            b += 1
        while a > 0 and old[a - 1] == "\r":  # never split a \r\n
            a -= 1
        while b > 0 and old[len(old) - b] == "\n" and len(old) - b > 0 and old[len(old) - b - 1] == "\r":
            b -= 1
        r = t.Range(start=model.position(a), end=model.position(len(old) - b))
        ins = new[a:len(new) - b]
        self.note(f"undo {uri.rsplit('/', 1)[-1]} {r.start.line}:{r.start.character}-{r.end.line}:"
                  f"{r.end.character} -> {ins[:40]!r}")
        model.text = old[:a] + ins + old[len(old) - b:]
        assert model.text == new
        self.versions[uri] += 1
        self.client.text_document_did_change(t.DidChangeTextDocumentParams(
            text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[t.TextDocumentContentChangePartial(range=r, text=ins)]))

    def change(self, uri: str) -> None:
        model = self.models[uri]
        rng = self.rng
        if uri in self.good and self.good[uri] != model.text and rng.random() < 0.3:
            return self.restore(uri)
        changes = []
        near = None
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            if rng.random() < 0.02:  # a full-text replacement
                new = read(rng.choice(CORPUS)) if rng.random() < 0.5 else model.text[::-1][:200]
                changes.append(t.TextDocumentContentChangeWholeDocument(text=new))
                model.text = new
                self.note(f"replace all of {uri.rsplit('/', 1)[-1]}")
                continue
            a = random_offset(rng, model.text, near)
            b = a if rng.random() < 0.5 else random_offset(rng, model.text, a)
            a, b = min(a, b), max(a, b)
            if rng.random() < 0.15:  # a large deletion / selection replace
                b = random_offset(rng, model.text, None)
                a, b = min(a, b), max(a, b)
            ins = random_text(rng, model)
            r = t.Range(start=model.position(a), end=model.position(b))
            changes.append(t.TextDocumentContentChangePartial(range=r, text=ins))
            self.note(f"change {uri.rsplit('/', 1)[-1]} {r.start.line}:{r.start.character}-"
                      f"{r.end.line}:{r.end.character} -> {ins!r}")
            model.text = model.text[:a] + ins + model.text[b:]
            near = a
        self.versions[uri] += 1
        self.client.text_document_did_change(t.DidChangeTextDocumentParams(
            text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=changes))

    # -- checks -------------------------------------------------------------------------------------
    async def probe(self, uri: str) -> None:
        """The 'Disable DDP001 for this line' edit reveals the server's copy of one line."""
        model = self.models[uri]
        nlines = len(model.lines())
        line = self.rng.randrange(nlines)
        probe = t.Diagnostic(range=t.Range(start=t.Position(line=line, character=0),
                                           end=t.Position(line=line, character=0)),
                             message="probe", source="ddp-lint", code="DDP001")
        acts = await answered(self.client.text_document_code_action_async(t.CodeActionParams(
            text_document=t.TextDocumentIdentifier(uri=uri), range=probe.range,
            context=t.CodeActionContext(diagnostics=[probe], only=[t.CodeActionKind.QuickFix]))), "codeAction")
        disable = [a for a in acts or [] if a.title == "Disable DDP001 for this line"]
        want = add_noqa_edit(model.line(line), line, "DDP001")
        if want is None:
            if disable:
                self.fail(f"line {line} already suppresses DDP001 but the server offers to disable it")
        else:
            if len(disable) != 1:
                self.fail(f"no 'Disable DDP001' action for line {line}: {[a.title for a in acts or []]}")
            (edit,) = self.edits_of(disable[0].edit, uri)
            got = (edit.range, edit.new_text)
            exp = (model.to_client_range(want.range), want.content)
            if got != exp:
                self.fail(f"the server's line {line} differs from the model's {model.line(line)!r}: "
                          f"noqa edit {got} != {exp}")
        for a in acts or []:
            if a.title != "Disable DDP001 for this line":
                await self.check_quickfix(uri, a)
        self.checked["probe"] += 1

    def edits_of(self, edit: t.WorkspaceEdit, uri: str) -> list[t.TextEdit]:
        out = []
        for dc in edit.document_changes or []:
            if isinstance(dc, t.TextDocumentEdit):
                assert dc.text_document.uri == uri
                out.extend(dc.edits)
        for u, es in (edit.changes or {}).items():
            assert u == uri
            out.extend(es)
        return out

    async def diagnostics(self, uri: str, after: int) -> list[t.Diagnostic]:
        if self.pull:
            rep = await answered(self.client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
                text_document=t.TextDocumentIdentifier(uri=uri))), "textDocument/diagnostic")
            return list(rep.items)
        p = await wait_publish(self.client, uri, self.versions[uri], after=after)
        return list(p.diagnostics)

    async def check_diagnostics(self, uri: str, after: int) -> list[t.Diagnostic]:
        model = self.models[uri]
        diags = await self.diagnostics(uri, after)
        for d in diags:
            if not model.valid_range(d.range):
                self.fail(f"diagnostic {d.code} {d.range} is not a valid range of the document")
            for rel in d.related_information or []:
                if rel.location.uri == uri and not model.valid_range(rel.location.range):
                    self.fail(f"related location {rel.location.range} of {d.code} is outside the document")
        res = expected(model, self.paths[uri], self.open_models())
        if res.syntax_error is None:
            self.good[uri] = model.text
            got = sorted(diag_key(d) for d in diags)
            exp = sorted(finding_key(model, f) for f in res.findings)
            if got != exp:
                self.fail(f"diagnostics differ from the engine's on the model text:\n"
                          f"  server only: {sorted(set(got) - set(exp))}\n  model only: {sorted(set(exp) - set(got))}")
            self.checked["parsed"] += 1
        else:
            syn = [diag_key(d) for d in diags if d.code == "DDP000"]
            if syn != [finding_key(model, res.syntax_error)]:
                self.fail(f"DDP000 {syn} != {finding_key(model, res.syntax_error)}")
        self.checked["diagnostics"] += 1
        return diags

    async def check_quickfix(self, uri: str, action: t.CodeAction) -> None:
        model = self.models[uri]
        if action.edit is None:
            return
        new = model.apply(self.edits_of(action.edit, uri))
        res = expected(model, self.paths[uri], self.open_models())
        cands = []
        for f in res.findings:
            if f.fix is None or f.fix.applicability is Applicability.DISPLAY_ONLY:
                continue
            cands.append(apply_edits(model.text, f.fix.edits))
        if new not in cands:
            self.fail(f"quick fix {action.title!r} does not match any engine fix on the model text")
        self.checked["quickfix"] += 1

    async def check_fixes(self, uri: str, diags: list[t.Diagnostic]) -> None:
        model = self.models[uri]
        ours = [d for d in diags if d.source == "ddp-lint" and d.data]
        if ours:
            d = self.rng.choice(ours)
            acts = await answered(self.client.text_document_code_action_async(t.CodeActionParams(
                text_document=t.TextDocumentIdentifier(uri=uri), range=d.range,
                context=t.CodeActionContext(diagnostics=[d], only=[t.CodeActionKind.QuickFix]))), "codeAction")
            for a in acts or []:
                if not a.title.startswith("Disable "):
                    await self.check_quickfix(uri, a)
        acts = await answered(self.client.text_document_code_action_async(t.CodeActionParams(
            text_document=t.TextDocumentIdentifier(uri=uri), range=t.Range(start=t.Position(line=0, character=0),
                                                                          end=t.Position(line=0, character=0)),
            context=t.CodeActionContext(diagnostics=[], only=[FIX_ALL]))), "codeAction fixAll")
        path = self.paths[uri]
        settings = Settings()
        want, _ = fix_all(model.text, lambda s: check_source(s, path, settings).findings, unsafe=False)
        got = model.text
        for a in acts or []:
            if a.kind == FIX_ALL and a.edit is not None:
                got = model.apply(self.edits_of(a.edit, uri))
        if got != want:
            self.fail("fix-all edit applied to the model differs from analysis.fixes.fix_all on it")
        if want != model.text:
            assert parses(want) or not parses(model.text)
            self.checked["fixall"] += 1

    # -- the stream ---------------------------------------------------------------------------------
    async def run(self, steps: int, open_docs: bool = True, churn: float = 1.0) -> None:
        """``churn`` scales how often a document is closed and another one drawn and opened."""
        rng = self.rng
        if open_docs:
            for name in NAMES:
                self.open(name, read(rng.choice(CORPUS)))
            for uri in list(self.models):
                await self.check_diagnostics(uri, 0)
        for step in range(steps):
            open_uris = sorted(self.models)
            r = rng.random()
            if r < 0.02 * churn and len(open_uris) > 1:
                uri = rng.choice(open_uris)
                n = len(self.client.publishes)
                self.close(uri)
                if not self.pull:
                    # a check that finished before the server read didClose may publish first; the
                    # clear must come, and nothing may follow it for the closed document
                    await wait_publish(self.client, uri, after=n, pred=lambda q: not q.diagnostics)
                    await asyncio.sleep(scaled(0.3))
                    pubs = self.client.publishes
                    i = next(j for j in range(n, len(pubs)) if pubs[j].uri == uri and not pubs[j].diagnostics)
                    left = [d.code for q in pubs[i + 1:] if q.uri == uri for d in q.diagnostics]
                    if left:
                        self.fail(f"didClose left diagnostics: {left}")
                continue
            if r < 0.05 * churn and len(open_uris) < len(NAMES):
                closed = [n for n in NAMES if (self.root / n).as_uri() not in self.models]
                n_pub = len(self.client.publishes)
                uri = self.open(rng.choice(closed), read(rng.choice(CORPUS)))
                await self.check_diagnostics(uri, n_pub)
                continue
            uri = rng.choice(open_uris)
            n_pub = len(self.client.publishes)
            for _ in range(1 if self.pull else rng.choice((1, 1, 2, 4))):  # push: bursts end in one publish
                self.change(uri)
            await self.probe(uri)
            diags = await self.check_diagnostics(uri, n_pub)
            fixable = any(d.data for d in diags) and self.good.get(uri) == self.models[uri].text
            if rng.random() < (0.4 if fixable else 0.03):
                await self.check_fixes(uri, diags)
            if step % 100 == 0:
                if not server_alive(self.client):
                    self.fail("the server process died")
                errs = internal_errors(self.client)
                if errs:
                    self.fail("the server logged internal errors:\n" + "\n".join(errs[:3]))
        if not server_alive(self.client):
            self.fail("the server process died")
        errs = internal_errors(self.client)
        if errs:
            self.fail("the server logged internal errors:\n" + "\n".join(errs[:3]))


@pytest.mark.timeout(900 if LONG else 300)
@pytest.mark.parametrize("client_name,encoding,pull,steps", [
    ("vscode", t.PositionEncodingKind.Utf16, False, STEPS),  # VS Code 1.65: push, UTF-16
    ("neovim-0.11", t.PositionEncodingKind.Utf8, True, STEPS),  # Neovim 0.11: pull, UTF-8 first
    ("emacs", t.PositionEncodingKind.Utf32, False, STEPS // 2),  # Emacs 29 (eglot): push, UTF-32
])
async def test_random_edit_stream(tmp_path, client_name, encoding, pull, steps):
    client, init = await start_session(client_name, tmp_path, init_options={"debounceMs": 0})
    try:
        stream = Stream(client, init, tmp_path, client_name, SEED + len(client_name))
        assert (stream.pull, stream.enc) == (pull, encoding), "the capabilities select the mode and encoding"
        t0 = time.perf_counter()
        await stream.run(steps)
        # the documents are drawn from the fixtures, so a new fixture changes the whole path: a path
        # that happened to meet few fixable documents (few quick fixes, or no fix-all) goes on (bounded
        # by as many steps again)
        # rather than skate past the quick-fix checks or fail on the draw; it closes documents and
        # draws new ones five times as often, since the documents open may hold few fixes (stop 49's
        # CI: 4 quick fixes in 1,550 steps on the same three documents)
        extra = 0
        while (stream.checked["quickfix"] < 5 or stream.checked["fixall"] < 1) and extra < steps:
            await stream.run(100, open_docs=False, churn=5.0)
            extra += 100
        took = time.perf_counter() - t0
        print(f"{client_name}: {steps} steps in {took:.1f}s; checked {stream.checked}")
        # the stream must really have exercised the checks, not skated past them
        assert stream.checked["probe"] >= steps * 0.8
        assert stream.checked["parsed"] >= 20 and stream.checked["quickfix"] >= 5
        assert stream.checked["fixall"] >= 1
    finally:
        await stop_session(client)
