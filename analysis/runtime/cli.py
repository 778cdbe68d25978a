"""``ddp-lint run``: text and JSON output over :func:`analysis.runtime.api.run_script`."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading

from ..output import display_message, finding_to_json, printable, related_message
from .api import EXIT_CANCELLED, EXIT_ERROR, RunResult, run_script
from .states import count

_OWN_OPTS = {"--nproc": int, "--timeout": float, "--backend": str, "--emulate": str, "--python": str,
             "--output-format": str, "--nnodes": int, "--node-rank": int, "--rdzv-endpoint": str,
             "--rdzv-id": str, "--rdzv-backend": str, "--report": str, "--dump": str}
_CHOICES = {"--backend": ("auto", "nccl", "gloo"), "--emulate": ("auto", "on", "off"), "--output-format": ("text", "json")}


class _Usage(Exception):
    pass


def _split_args(args) -> list[str]:
    """``ddp-lint run SCRIPT [OPTIONS] [-- ARGS]``: options after the script are ddp-lint's,
    everything after ``--`` goes to the script."""
    rest = list(args.script_args or [])
    mine, script_args = (rest, []) if "--" not in rest else (rest[: rest.index("--")], rest[rest.index("--") + 1:])
    i = 0
    while i < len(mine):
        tok = mine[i]
        name, eq, val = tok.partition("=")
        if name not in _OWN_OPTS:
            raise _Usage(f"unknown option {tok!r} after the script; pass the script's own arguments after `--` "
                         f"(ddp-lint run SCRIPT [OPTIONS] -- ARGS)")
        if not eq:
            if i + 1 >= len(mine):
                raise _Usage(f"{name} needs a value")
            val = mine[i + 1]
            i += 1
        i += 1
        try:
            v = _OWN_OPTS[name](val)
        except ValueError:
            raise _Usage(f"{name}: invalid value {val!r}") from None
        if name in _CHOICES and v not in _CHOICES[name]:
            raise _Usage(f"{name} must be one of {', '.join(_CHOICES[name])}")
        setattr(args, name[2:].replace("-", "_"), v)
    return script_args


def _rel(path: str | None) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _rank_line(rs) -> str:
    """``rank 2: ...`` -> ``rank 2 (node 1, local 0): ...`` when the rank's node is known."""
    if rs.node is None:
        return rs.text
    head = f"rank {rs.rank}"
    place = f"{head} (node {rs.node}, local {rs.local_rank if rs.local_rank is not None else '?'})"
    return place + rs.text[len(head):] if rs.text.startswith(head) else rs.text


def _cell(x) -> str:
    """``:cell N`` for a location in a notebook (as ``ddp-lint check`` writes it)."""
    return f":cell {x.cell}" if getattr(x, "cell", None) is not None else ""


def format_text(res: RunResult) -> str:
    out = []
    multi = getattr(res, "multinode", "single") != "single"
    if multi and res.multinode == "simulated":
        head = f"ddp-lint run: {_rel(res.script)} on {res.nnodes} simulated nodes x {res.nproc} rank{'s' if res.nproc != 1 else ''}"
    elif multi and res.multinode == "cluster":
        node = f"node {res.node_rank}" if res.node_rank is not None else "one node"
        head = f"ddp-lint run: {_rel(res.script)}, {node} of {res.nnodes}, {res.nproc} rank{'s' if res.nproc != 1 else ''}"
    elif res.multinode == "explained":
        head = f"ddp-lint explain: {res.script}, {res.nproc} rank{'s' if res.nproc != 1 else ''}"
    elif multi:
        head = f"ddp-lint merge: {_rel(res.script)}, {res.nproc} rank{'s' if res.nproc != 1 else ''} on {res.nnodes} node{'s' if res.nnodes != 1 else ''}"
    else:
        what = f"-m {res.module} ({_rel(res.script)})" if res.module else _rel(res.script)
        head = f"ddp-lint run: {what} on {res.nproc} rank{'s' if res.nproc != 1 else ''} under torchrun"
        if getattr(res, "launched", "torchrun") == "self-spawning":
            head = (f"ddp-lint run: {what} as one process that starts its own ranks ({res.nproc} seen; "
                    "--nproc is the script's business)")
    if res.emulated:
        head += " (emulated on CPU)"
    if res.multinode != "explained":
        head += f", {res.duration:.1f} s"
    out.append(head)
    for rs in res.ranks:
        text = _rank_line(rs) if multi else rs.text
        if rs.filename and rs.line and res.multinode != "explained":
            text = text.replace(f"{os.path.basename(rs.filename)}:{rs.line}", f"{_rel(rs.filename)}:{rs.line}")
        out.append(f"  {text}")
    if res.findings:
        out.append("")
    for f in res.findings:
        out.append(f"{_rel(f.filename)}{_cell(f)}:{f.range.start.line + 1}:{f.range.start.column + 1}: {f.code} "
                   f"{display_message(f)}")
        for r in f.related:
            out.append(f"    {_rel(r.filename or f.filename)}{_cell(r)}:{r.range.start.line + 1}:"
                       f"{r.range.start.column + 1}: {related_message(r)}")
        hint = f.details.get("hint") if isinstance(f.details, dict) else None
        if hint:
            out.append(f"    hint: {hint}")
    for n in res.notes:
        out.append(f"note: {n}")
    if res.cancelled:
        out.append("Cancelled.")
    elif res.findings:
        n = len(res.findings)
        out.append(f"Found {n} runtime problem{'s' if n != 1 else ''}.")
    elif res.exit_code == 0 and res.multinode == "explained":
        out.append("No mismatch or hang found in the artefacts.")
    elif res.exit_code == 0:
        out.append("All ranks finished cleanly.")
    # one line per entry: a newline or an ESC sequence in a script name, a rank's text or a merged
    # report's message is escaped, never printed
    return "\n".join(printable(line) for line in out) + "\n"


def cmd_run(args) -> int:
    try:
        script_args = _split_args(args)
    except _Usage as e:
        print(printable(f"ddp-lint: error: {e}"), file=sys.stderr)
        return EXIT_ERROR
    module = getattr(args, "module", None)
    if module is not None and args.script is not None:
        # ``-m MOD ARG...``: what argparse took for the script is the module's first argument
        script_args = [args.script, *script_args]
        args.script = None
    if module is None and args.script is None:
        print("ddp-lint: error: give a script, or -m MODULE", file=sys.stderr)
        return EXIT_ERROR
    if module is None and not os.path.exists(args.script):
        print(printable(f"ddp-lint: error: {args.script}: no such file"), file=sys.stderr)
        return EXIT_ERROR
    text_mode = args.output_format == "text"
    cancel = threading.Event()
    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                old[sig] = signal.signal(sig, lambda *_: cancel.set())
            except (ValueError, OSError):
                pass
    try:  # raw writes to a copy of stderr's descriptor: a blocked write holds no Python lock
        err_fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        err_fd = None

    def sink(chunk: bytes) -> None:  # the ranks' output goes to stderr as it comes (launcher.Forwarder)
        if err_fd is None:
            sys.stderr.write(chunk.decode("utf-8", "replace"))
            return
        while chunk:
            chunk = chunk[os.write(err_fd, chunk):]

    try:
        from .nodes import NodeOptions

        nodes = NodeOptions(nnodes=getattr(args, "nnodes", None), node_rank=getattr(args, "node_rank", None),
                            rdzv_endpoint=getattr(args, "rdzv_endpoint", None), rdzv_id=getattr(args, "rdzv_id", None),
                            rdzv_backend=getattr(args, "rdzv_backend", None))
        res = run_script(args.script or "", module=module, nproc=args.nproc, timeout=args.timeout, backend=args.backend,
                         emulate=args.emulate, python=args.python, script_args=script_args,
                         sink=sink if text_mode else None, cancel=cancel, nodes=nodes, rank_prefix=text_mode,
                         keep_records=bool(getattr(args, "dump", None)))
    finally:
        for sig, h in old.items():
            try:
                signal.signal(sig, h)
            except (ValueError, OSError):
                pass
    if res.exit_code == EXIT_ERROR:
        print(printable(f"ddp-lint: error: {res.error}"), file=sys.stderr)
        return EXIT_ERROR
    if getattr(args, "report", None) and not res.cancelled:
        from .merge import write_report

        try:
            res.notes.append(f"report written to {write_report(args.report, res)}")
        except OSError as e:
            print(printable(f"ddp-lint: error: cannot write the report {args.report!r}: {e.strerror or e}"),
                  file=sys.stderr)
            return EXIT_ERROR
    if getattr(args, "dump", None) and not res.cancelled:
        from .frwrite import write_dumps

        try:
            written = write_dumps(args.dump, res)
            res.notes.append(f"Flight Recorder-format dumps of {count(len([p for p in written if 'trace_rank_' in p]), 'rank')} "
                             f"written to {args.dump} (read them with `ddp-lint explain {args.dump}`)")
        except OSError as e:
            print(f"ddp-lint: error: cannot write the dumps to {args.dump!r}: {e.strerror or e}", file=sys.stderr)
            return EXIT_ERROR
    if text_mode:
        sys.stdout.write(format_text(res))
    else:
        sys.stdout.write(json.dumps([finding_to_json(f) for f in res.findings], indent=2, ensure_ascii=False, default=str) + "\n")
        for n in res.notes:
            print(printable(f"note: {n}"), file=sys.stderr)
    sys.stdout.flush()
    if res.cancelled:
        return EXIT_CANCELLED
    return res.exit_code


def cmd_merge(args) -> int:
    """``ddp-lint merge REPORT...``: one report of a multi-node run from its nodes' reports."""
    from .merge import MergeError, merge

    try:
        res = merge(list(args.reports))
    except MergeError as e:
        print(printable(f"ddp-lint: error: {e}"), file=sys.stderr)
        return EXIT_ERROR
    if args.output_format == "json":
        sys.stdout.write(json.dumps([finding_to_json(f) for f in res.findings], indent=2, ensure_ascii=False,
                                    default=str) + "\n")
        for n in res.notes:
            print(printable(f"note: {n}"), file=sys.stderr)
    else:
        sys.stdout.write(format_text(res))
    return res.exit_code


def cmd_explain(args) -> int:
    """``ddp-lint explain PATH...``: a failed job's artefacts pinned to this checkout's lines."""
    from ..output import print_findings
    from .explain import explain

    res = explain(list(args.paths), root=args.root, path_maps=args.path_map)
    if res.exit_code == EXIT_ERROR:
        print(f"ddp-lint: error: {res.error}", file=sys.stderr)
        return EXIT_ERROR
    if args.output_format == "text":
        sys.stdout.write(format_text(res))
    else:
        print_findings(res.findings, args.output_format, quiet=True)
        for n in res.notes:
            print(f"note: {n}", file=sys.stderr)
    return res.exit_code
