"""``ddp-lint.run``: run a file under torchrun from the editor (only on explicit request).

The run itself is ``analysis.runtime.api.run_script`` (a blocking call, run in a thread). This
module validates the command's argument, shows ``window/workDoneProgress`` (cancellable: cancel
kills the run), and turns the findings into ``ddp-lint (runtime)`` diagnostics on every file they
point into. They stay until the next run of the same script, or until the user edits their lines.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote, urlparse

from lsprotocol import types as t
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from ..analysis.model import Finding

from .commands import uri_argument
from .convert import path_to_uri, shift_finding, uri_to_path

log = logging.getLogger("ddp-lint.runtime")

_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ddp-lint-run")
    return _executor


RUN_TITLE = "Run with torchrun on local GPUs (ddp-lint)"
RUN_TITLE_EMULATED = "Run with torchrun on local GPUs (emulated on CPU) (ddp-lint)"
RUN_TITLE_CPU = "Run with torchrun on CPU (ddp-lint)"


def run_title(gpus: int | None, emulate: str) -> str:
    """The run action's title: it says when the run will be emulated on CPU. ``gpus`` is None
    until ``probe_gpus`` has answered (then the plain title)."""
    if emulate == "on" or (gpus == 0 and emulate == "auto"):
        return RUN_TITLE_EMULATED
    if gpus == 0:
        return RUN_TITLE_CPU
    return RUN_TITLE


async def probe_gpus(ls) -> None:
    """Count the local GPUs once, in a thread (the runtime API's own detection: /proc or
    ``nvidia-smi -L``, never ``import torch``), into ``ls.gpus``."""
    if getattr(ls, "gpus", None) is not None or getattr(ls, "gpu_probe", None) is not None:
        return
    loop = asyncio.get_running_loop()
    try:
        from ..analysis.runtime.api import gpu_count
    except ImportError:  # no runner here: the plain title
        return
    ls.gpu_probe = loop.run_in_executor(_pool(), gpu_count)
    try:
        ls.gpus = await ls.gpu_probe
    except Exception as e:
        log.debug("counting the local GPUs failed: %s", e)


class RuntimeResults:
    """What the runs found, by file, and the runs in progress.

    * ``findings``: uri -> runtime findings (moved with edits, dropped when their lines change);
    * ``targets``: script uri -> the uris its last run reported into;
    * ``live``: script path -> the cancel event of a run in progress.
    """

    def __init__(self):
        self.findings: dict[str, list[Finding]] = {}
        self.targets: dict[str, set[str]] = {}
        self.live: dict[str, threading.Event] = {}

    def for_uri(self, uri: str) -> list[Finding]:
        return self.findings.get(uri) or []

    def replace(self, script_uri: str, by_uri: dict[str, list[Finding]]) -> set[str]:
        """The results of a new run of ``script_uri`` replace those of its previous run; returns
        every uri whose runtime diagnostics changed."""
        previous = self.targets.get(script_uri, set())
        for u in previous:
            self.findings.pop(u, None)
        for u, fs in by_uri.items():
            self.findings[u] = sorted(fs, key=lambda f: (f.range.start, f.code))
        self.targets[script_uri] = set(by_uri)
        return previous | set(by_uri)

    def shift(self, uri: str, changes) -> bool:
        """Move ``uri``'s findings with the edits ``changes``; returns True when one was dropped
        because its lines were edited."""
        rt = self.findings.get(uri)
        if rt is None:
            return False
        dropped = False
        for ch in changes:
            if ch is None or not rt:
                continue
            kept = [g for g in (shift_finding(f, ch) for f in rt) if g is not None]
            dropped |= len(kept) != len(rt)
            rt = kept
        if rt:
            self.findings[uri] = rt
        else:
            self.findings.pop(uri, None)
        return dropped

    def cancel_all(self) -> None:
        """Cancel every run in progress (the runner kills its processes)."""
        for ev in list(self.live.values()):
            ev.set()

    def wait_for_runs(self, timeout: float) -> None:
        """After ``cancel_all``: give the runs up to ``timeout`` seconds to clean up."""
        pool = _executor
        if pool is not None and self.live:
            waiter = threading.Thread(target=pool.shutdown, kwargs={"wait": True}, daemon=True)
            waiter.start()
            waiter.join(timeout)


class RunRefused(JsonRpcInvalidParams):
    """A refused run request. The message quotes the client's argument, so it is capped: a
    100 KB argument must not come back as a 100 KB error."""

    MAX = 500

    def __init__(self, message: str = "", *args, **kwargs):
        if len(message) > self.MAX:
            message = message[: self.MAX - 20] + f"... ({len(message)} chars)"
        super().__init__(message, *args, **kwargs)


def validate_target(ls, uri: str) -> str:
    """The local path to run, or a clear ``InvalidParams`` error. Accepted: a ``file:`` URI of an
    existing Python file that is inside a workspace folder or is an open document."""
    p = urlparse(uri)
    if p.scheme != "file":
        raise RunRefused(f"ddp-lint.run: only files on disk can be run; {uri!r} is not a file: URI")
    if p.netloc not in ("", "localhost"):
        raise RunRefused(f"ddp-lint.run: {uri!r} names a remote host; only local files can be run")
    raw = unquote(p.path)
    if not raw or "\x00" in raw:
        raise RunRefused(f"ddp-lint.run: {uri!r} has no usable path")
    if any(seg == ".." for seg in raw.replace("\\", "/").split("/")):
        raise RunRefused(f"ddp-lint.run: {uri!r} contains '..'; give the file's own path")
    path = os.path.normpath(raw)
    if not os.path.isabs(path):
        raise RunRefused(f"ddp-lint.run: {uri!r} is not an absolute path")
    if not os.path.exists(path):
        raise RunRefused(f"ddp-lint.run: {path} does not exist")
    if not os.path.isfile(path):
        raise RunRefused(f"ddp-lint.run: {path} is not a file")
    if not path.endswith((".py", ".pyw")):
        raise RunRefused(f"ddp-lint.run: {path} is not a Python file (.py)")
    real = os.path.realpath(path)
    open_paths = set()
    for st in ls.docs.values():
        if st.doc.path:
            open_paths.add(os.path.realpath(st.doc.path))
    if real in open_paths:
        return path
    for folder in ls.folders():
        rf = os.path.realpath(folder)
        try:
            if os.path.commonpath([rf, real]) == rf:
                return path
        except ValueError:
            continue
    raise RunRefused(f"ddp-lint.run: {path} is neither inside a workspace folder nor an open document")


def _folder_of(ls, path: str) -> str:
    real = os.path.realpath(path)
    best = None
    for folder in ls.folders():
        rf = os.path.realpath(folder)
        try:
            if os.path.commonpath([rf, real]) == rf and (best is None or len(rf) > len(best)):
                best = rf
        except ValueError:
            continue
    return best or os.path.dirname(path)


def run_options(args) -> dict:
    """``nproc`` and ``emulate`` given with the URI (``{"uri": ..., "nproc": 2, "emulate": "on"}``,
    as the code lenses send them); they win over the ``run.*`` settings for this run."""
    a = args[0] if len(args) == 1 else None
    if isinstance(a, list) and len(a) == 1:
        a = a[0]
    if not isinstance(a, dict):
        return {}
    out = {}
    n = a.get("nproc")
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 64:
            raise JsonRpcInvalidParams(f"ddp-lint.run: nproc must be a number of ranks from 1 to 64, got {n!r}")
        out["nproc"] = n
    e = a.get("emulate")
    if e is not None:
        if e not in ("auto", "on", "off"):
            raise JsonRpcInvalidParams(f"ddp-lint.run: emulate must be auto, on or off, got {e!r}")
        out["emulate"] = e
    return out


async def run_command(ls, args) -> dict:
    if not ls.trusted:  # checked before the argument is even looked at (no file probing)
        raise RunRefused(f"ddp-lint.run is disabled: {ls.untrusted_reason}")
    uri = uri_argument(args)
    opts = run_options(args)  # a code lens's "Run with N ranks (emulated)": nproc / emulate
    path = validate_target(ls, uri)
    script_uri = path_to_uri(path)
    key = os.path.realpath(path)
    if key in ls.results.live:
        raise JsonRpcInvalidParams(f"ddp-lint.run: {os.path.basename(path)} is already running; "
                                   "cancel that run first")
    try:
        from ..analysis.runtime.api import run_script
    except ImportError as e:
        raise JsonRpcException(code=-32603, message=f"ddp-lint.run: the runtime runner is not available ({e})") from None

    st = ls.docs.get(uri) or ls.docs.get(script_uri)
    if st is not None:
        try:
            from ..analysis.io import read_source

            if read_source(path) != st.doc.text:
                ls.show(t.MessageType.Warning, f"ddp-lint: {os.path.basename(path)} has unsaved changes; "
                        "running the saved file")
        except Exception:  # unreadable: the runner reports it
            pass
    rs = ls.settings.run
    cancel = threading.Event()
    ls.results.live[key] = cancel
    loop = asyncio.get_running_loop()
    name = os.path.basename(path)
    token = None
    progress = ls.work_done_progress
    if ls.capability("window", "work_done_progress", default=False):
        token = f"ddp-lint-run-{uuid.uuid4().hex[:12]}"
        try:
            await asyncio.wait_for(progress.create_async(token), timeout=10)
            progress.begin(token, t.WorkDoneProgressBegin(
                title=f"ddp-lint: running {name}", message="starting", cancellable=True, percentage=0))
            fut = progress.tokens.get(token)
            if fut is not None:
                fut.add_done_callback(lambda f: cancel.set() if f.cancelled() else None)
        except Exception as e:
            log.warning("no progress reporting for this run: %s", e)
            token = None

    def report(message: str, percent=None):
        if token is None:
            return
        try:
            pct = None if percent is None else max(0, min(100, int(percent)))
            progress.report(token, t.WorkDoneProgressReport(message=str(message)[:200], percentage=pct))
        except Exception:
            pass

    def on_progress(message: str, percent=None):  # called from the runner's thread
        log.debug("run %s: %s", name, message)
        loop.call_soon_threadsafe(report, message, percent)

    job = functools.partial(
        run_script, path, nproc=opts.get("nproc", rs.nproc), timeout=rs.timeout_seconds, backend=rs.backend,
        emulate=opts.get("emulate", rs.emulate), python=rs.python, script_args=tuple(rs.args), cwd=_folder_of(ls, path),
        progress=on_progress, cancel=cancel)
    log.info("running %s (nproc=%s, timeout=%ss, emulate=%s)", path, rs.nproc or "auto",
             rs.timeout_seconds, rs.emulate)
    result = None
    try:
        fut = loop.run_in_executor(_pool(), job)
        try:
            result = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # $/cancelRequest (or shutdown): stop the run (the runner kills its processes within
            # 2 s), wait for that so the script counts as running until then, publish nothing
            cancel.set()
            await asyncio.wait([fut], timeout=5)
            raise
        report("collecting")
    finally:
        ls.results.live.pop(key, None)
        if token is not None:
            tok, token = token, None  # late progress callbacks from the runner's thread: ignored
            msg = "cancelled" if (result is not None and result.cancelled) or cancel.is_set() else "done"
            try:
                progress.end(tok, t.WorkDoneProgressEnd(message=msg))
            except Exception:
                pass

    return publish_run(ls, script_uri, name, result)


def publish_run(ls, script_uri: str, name: str, result) -> dict:
    by_uri: dict[str, list] = {}
    for f in result.findings:
        fn = f.filename
        if not fn or fn.startswith("<"):
            fn = uri_to_path(script_uri) or fn
        by_uri.setdefault(path_to_uri(os.path.abspath(fn)), []).append(f)
    touched = ls.results.replace(script_uri, by_uri)
    for u in sorted(touched):
        ls.publish_uri(u)
    if ls.pull:
        ls.request_refresh()
    n = len(result.findings)
    for note in result.notes or ():
        log.info("run %s: %s", name, note)
    emu = " (emulated on CPU)" if result.emulated else ""
    error = getattr(result, "error", None)
    if result.cancelled:
        summary = f"ddp-lint run of {name} was cancelled"
    elif error:
        summary = f"ddp-lint could not run {name}: {error}"
    elif n:
        summary = f"ddp-lint run of {name}: {n} runtime problem{'s' if n != 1 else ''}{emu}"
    elif result.exit_code not in (0, 1):
        summary = f"ddp-lint could not complete the run of {name} (exit status {result.exit_code}); see the logs"
        error = summary
    else:
        summary = f"ddp-lint run of {name}: clean (exit status {result.exit_code}){emu}"
    log.info("%s", summary)
    ls.show(t.MessageType.Error if error else t.MessageType.Warning if n else t.MessageType.Info, summary)
    return {"exitCode": result.exit_code, "findings": n, "emulated": bool(result.emulated),
            "cancelled": bool(result.cancelled), "error": error, "notes": list(result.notes or ()),
            "files": sorted(by_uri)}


# -- ddp-lint.explain ----------------------------------------------------------------------------
def validate_artefacts(uri: str) -> str:
    """The local folder (or file) of a failed job's artefacts, or a clear ``InvalidParams`` error."""
    p = urlparse(uri)
    if p.scheme not in ("file", ""):
        raise RunRefused(f"ddp-lint.explain: {uri!r} is not a file: URI or a path")
    if p.scheme == "file" and p.netloc not in ("", "localhost"):
        raise RunRefused(f"ddp-lint.explain: {uri!r} names a remote host; copy the artefacts here first")
    raw = unquote(p.path) if p.scheme == "file" else uri
    if not raw or "\x00" in raw:
        raise RunRefused(f"ddp-lint.explain: {uri!r} has no usable path")
    path = os.path.normpath(raw)
    if not os.path.isabs(path):
        raise RunRefused(f"ddp-lint.explain: {uri!r} is not an absolute path")
    if not os.path.exists(path):
        raise RunRefused(f"ddp-lint.explain: {path} does not exist")
    return path


async def explain_command(ls, args) -> dict:
    """``ddp-lint.explain``: a folder of a failed job's artefacts (Flight Recorder dumps, error
    files, torchrun logs) -> runtime diagnostics on the workspace's files, kept as a run's are (until
    the next explain of the same folder, or until their lines are edited). Argument: the folder's
    URI, or ``{"uri": ..., "pathMap": ["FROM=TO", ...]}``. Reads files, runs nothing; refused where
    the server reads no file a client names (untrusted, --tcp)."""
    if not ls.trusted:
        raise RunRefused(f"ddp-lint.explain is disabled: {ls.untrusted_reason}")
    flat = tuple(args[0]) if len(args) == 1 and isinstance(args[0], list) else tuple(args)
    maps = []
    if len(flat) == 1 and isinstance(flat[0], dict) and flat[0].get("pathMap") is not None:
        maps = flat[0]["pathMap"]
        if not isinstance(maps, list) or not all(isinstance(m, str) for m in maps):
            raise RunRefused("ddp-lint.explain: pathMap must be a list of \"FROM=TO\" strings")
    path = validate_artefacts(uri_argument(flat))
    from ..analysis.runtime.explain import explain

    folders = list(ls.folders())
    root = folders[0] if folders else os.path.dirname(path)
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(_pool(), functools.partial(explain, [path], root=root, path_maps=maps))
    name = os.path.basename(path.rstrip(os.sep)) or path
    key = path_to_uri(path)
    if result.error:
        for u in sorted(ls.results.replace(key, {})):  # the folder's previous findings go
            ls.publish_uri(u)
        if ls.pull:
            ls.request_refresh()
        ls.show(t.MessageType.Error, f"ddp-lint explain of {name}: {result.error}")
        return {"exitCode": result.exit_code, "findings": 0, "error": result.error, "notes": list(result.notes),
                "files": [], "ranks": []}
    by_uri: dict[str, list] = {}
    for f in result.findings:
        by_uri.setdefault(path_to_uri(os.path.abspath(f.filename)), []).append(f)
    for u in sorted(ls.results.replace(key, by_uri)):
        ls.publish_uri(u)
    if ls.pull:
        ls.request_refresh()
    n = len(result.findings)
    for note in result.notes:
        log.info("explain %s: %s", name, note)
    summary = (f"ddp-lint explain of {name}: {n} runtime problem{'s' if n != 1 else ''}" if n
               else f"ddp-lint explain of {name}: no mismatch or hang found")
    ls.show(t.MessageType.Warning if n else t.MessageType.Info, summary)
    return {"exitCode": result.exit_code, "findings": n, "error": None, "notes": list(result.notes),
            "files": sorted(by_uri), "ranks": [rs.text for rs in result.ranks]}
