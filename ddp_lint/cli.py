"""``ddp-lint`` command line: check | run | rule | server.

Start-up is kept small: ``check`` imports only the stdlib and ``analysis``; the runtime runner and
the language server are imported only by their subcommands.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    pass


OUTPUT_FORMATS = ("concise", "full", "json", "sarif", "github", "junit", "text")

CHECK_EPILOG = """\
output formats (--output-format):
  concise  one line per finding: FILE:LINE:COL: CODE [*] message (the default; `text` is an alias)
  full     each finding with its source line and a caret, the fix preview and related locations
  json     a JSON array in Ruff's schema (code, message, location, end_location, fix, url, ...)
  sarif    SARIF 2.1.0 (GitHub code scanning and other SARIF viewers)
  github   GitHub Actions workflow commands (::error file=...::), shown as annotations on the PR
  junit    JUnit XML, one test case per finding

rule selection, lowest to highest precedence:
  1. the defaults (every rule that is on by default);
  2. the nearest .ddp-lint.toml, ddp-lint.toml or pyproject.toml with [tool.ddp-lint]
     at or above the first PATH, in that order of precedence within a folder (or the file
     given with --config; --isolated ignores every configuration file); discovery stops
     below a world-writable folder owned by another user (/tmp), with a warning;
     then --config KEY=VALUE overrides;
  3. the command line: --select replaces the whole selection, including the configuration's
     select and ignore; --extend-select adds codes even when the configuration ignores them;
     --ignore drops codes. per-file-ignores from the configuration and `# noqa` comments
     still apply.

exit status:
  0  no findings (or --exit-zero), or --diff with nothing to fix
  1  findings remain (or --diff has fixes to show)
  2  an error: bad option or configuration, a file that cannot be read, a fix that could
     not be written or a file that changed on disk while it was being fixed
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ddp-lint", description="Catch torch.distributed / DDP misuse.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command")

    c = sub.add_parser("check", help="statically check files and folders",
                       description="Statically check Python files and folders for torch.distributed / "
                                   "DDP misuse. Never runs the code.",
                       epilog=CHECK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("paths", nargs="*", help="files or folders ('-' for stdin); default: .")
    c.add_argument("--stdin-filename", metavar="NAME", help="file name to report for stdin input")
    c.add_argument("--output-format", choices=OUTPUT_FORMATS, default=None, metavar="FORMAT",
                   help="concise (default, or the configuration's output-format), full, json, sarif, "
                        "github or junit; see below")
    c.add_argument("-o", "--output-file", metavar="PATH", help="write the findings to PATH instead of stdout")
    c.add_argument("--statistics", action="store_true", help="print the number of findings per rule")
    c.add_argument("--fix", action="store_true", help="apply safe fixes")
    c.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes (with --fix/--diff)")
    c.add_argument("--diff", action="store_true", help="print the fixes as a diff; write nothing")
    c.add_argument("--select", metavar="CODES", action="append", help="comma-separated codes or prefixes; replaces the default set and "
                                    "the configuration's select and ignore")
    c.add_argument("--extend-select", metavar="CODES", action="append", help="comma-separated codes or prefixes to add (wins over the "
                                           "configuration's ignore)")
    c.add_argument("--ignore", metavar="CODES", action="append", help="comma-separated codes or prefixes to drop")
    c.add_argument("--config", metavar="PATH|KEY=VALUE", action="append",
                   help="use this pyproject.toml (or a ddp-lint.toml with the keys at top level) "
                        "instead of discovery; or KEY = VALUE (TOML) to override one setting "
                        "(repeatable; as Ruff's --config)")
    c.add_argument("--exclude", metavar="GLOBS", action="append",
                   help="comma-separated globs to exclude from folder walks (replaces the configuration's)")
    c.add_argument("--extend-exclude", metavar="GLOBS", action="append",
                   help="comma-separated globs to exclude in addition to the configured ones")
    c.add_argument("--show-settings", action="store_true",
                   help="print the settings that apply to the first PATH and exit")
    c.add_argument("--show-files", action="store_true", help="print the files that would be checked and exit")
    c.add_argument("--add-noqa", action="store_true",
                   help="add `# noqa: CODE` to every line with a finding (adopting ddp-lint on a large codebase)")
    c.add_argument("--cache-dir", metavar="PATH",
                   help="the findings cache's folder (default: .ddp-lint-cache/ in the project root)")
    c.add_argument("--isolated", action="store_true",
                   help="ignore every configuration file (defaults plus the command line)")
    c.add_argument("--force-exclude", action="store_true",
                   help="apply the exclusions to files named on the command line too (for pre-commit)")
    c.add_argument("--no-cache", action="store_true",
                   help="do not read or write the findings cache (.ddp-lint-cache/ in the project root)")
    c.add_argument("--no-respect-gitignore", dest="respect_gitignore", action="store_false", default=None,
                   help="also check files that .gitignore / .ignore / .git/info/exclude ignore")
    c.add_argument("-j", "--jobs", type=int, default=0, metavar="N", help="parallel workers (default: all cores)")
    c.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    c.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")

    r = sub.add_parser("rule", help="print a rule's documentation")
    r.add_argument("code", nargs="?", help="rule code or name, e.g. DDP001 or nccl-without-set-device")
    r.add_argument("--all", action="store_true", help="list every rule")
    r.add_argument("--output-format", choices=("text", "json"), default="text")

    run = sub.add_parser(
        "run", help="run a script under torchrun and map runtime failures to lines",
        description="Run SCRIPT on N local ranks under torchrun (on CPU with gloo and an emulated "
                    "CUDA/NCCL when there are not enough GPUs) and attach every rank's exception, "
                    "collective mismatch or hang to the line that caused it.",
        epilog="Arguments after -- go to the script verbatim: ddp-lint run train.py -- --epochs 1. "
               "Exit status: 0 when every rank finished cleanly, 1 when there are findings, 2 when the "
               "run could not happen (missing file, no torch, bad option), 130 when cancelled.")
    run.add_argument("script", nargs="?", default=None, help="the Python file to run")
    run.add_argument("-m", dest="module", default=None, metavar="MODULE",
                     help="run a module of the current folder instead of a file, as python -m does")
    run.add_argument("--nproc", type=int, default=None, metavar="N",
                     help="number of ranks (default: the number of local GPUs, or 2 with fewer than 2)")
    run.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                     help="a run still going this long after every rank started is a hang (default: 60)")
    run.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                     help="force this process-group backend on a real run (default: auto, the script's own)")
    run.add_argument("--emulate", choices=("auto", "on", "off"), default="auto",
                     help="emulate CUDA and NCCL on CPU: auto (when the GPUs do not suffice), on, off")
    run.add_argument("--python", default=None, help="interpreter that has the user's torch (default: this one)")
    run.add_argument("--output-format", choices=("text", "json"), default="text")
    mn = run.add_argument_group("multi-node (docs/runtime.md#multi-node)")
    mn.add_argument("--nnodes", type=int, default=None, metavar="N",
                    help="nodes; without --rdzv-endpoint, N nodes of --nproc ranks simulated on this machine")
    mn.add_argument("--node-rank", type=int, default=None, metavar="R", help="this node's rank (passed to torchrun)")
    mn.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                    help="a real multi-node job: torchrun's rendezvous endpoint (passed to torchrun unchanged)")
    mn.add_argument("--rdzv-id", default=None, metavar="ID", help="torchrun's rendezvous id")
    mn.add_argument("--rdzv-backend", default=None, metavar="NAME", help="torchrun's rendezvous backend (default: c10d)")
    mn.add_argument("--report", default=None, metavar="PATH",
                    help="also write this node's report (JSON) for `ddp-lint merge`; {node} becomes the node rank")
    run.add_argument("--dump", default=None, metavar="DIR",
                     help="also write the run's artefacts in Flight Recorder / torchelastic formats to DIR, for "
                          "`ddp-lint explain DIR` (docs/explain.md)")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    m = sub.add_parser("merge", help="merge the per-node reports of a multi-node `ddp-lint run`",
                       description="Join the reports that `ddp-lint run --report PATH` wrote on each node into "
                                   "one, with global ranks.")
    m.add_argument("reports", nargs="+", metavar="REPORT", help="per-node JSON reports")
    m.add_argument("--output-format", choices=("text", "json"), default="text")

    ex = sub.add_parser("explain", help="explain a failed job's artefacts (Flight Recorder dumps, error files)",
                        description="Read a failed job's Flight Recorder dumps, torchelastic error files and "
                                    "torchrun summaries (files or folders, found by content) and pin each rank to "
                                    "a line of this checkout. See docs/explain.md.")
    ex.add_argument("paths", nargs="+", metavar="PATH", help="artefact files or folders, in any mix")
    ex.add_argument("--path-map", action="append", default=[], metavar="FROM=TO",
                    help="map the job's path prefix FROM to TO here (repeatable; default: the longest suffix "
                         "of each path that exists under --root)")
    ex.add_argument("--root", default=None, metavar="DIR", help="the checkout the paths map to (default: .)")
    ex.add_argument("--output-format", choices=("text", "concise", "json", "sarif", "github"), default="text")

    s = sub.add_parser("server", help="start the language server")
    s.add_argument("--stdio", action="store_true", help="use stdio (the default)")
    s.add_argument("--tcp", metavar="HOST:PORT",
                   help="listen on a TCP address instead of stdio; any local user can connect to it, so the "
                        "server then runs no code and reads no file a client names (see SECURITY.md)")
    s.add_argument("--allow-run", action="store_true",
                   help="with --tcp: allow ddp-lint.run and the run.* settings anyway; every local user who "
                        "can connect can then run code as you")
    s.add_argument("--socket", metavar="PATH",
                   help="listen on a Unix socket created at PATH with mode 0600 (only you can connect)")
    s.add_argument("--log-level", default=None, help="error, warning, info or debug (default: the client's setting)")
    p._ddp_subparsers = {"check": c, "rule": r, "run": run, "merge": m, "server": s}  # type: ignore[attr-defined]
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    # ``run`` passes everything after ``--`` to the script verbatim; argparse would swallow the
    # ``--`` itself, so split it off first.
    after_dashdash = None
    cmd = next((a for a in argv if not a.startswith("-")), None)
    if cmd == "run" and "--" in argv:
        i = argv.index("--")
        argv, after_dashdash = argv[:i], argv[i + 1:]
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # an unknown flag of a subcommand: that subcommand's usage, not the top-level one
        sub = getattr(parser, "_ddp_subparsers", {}).get(args.command, parser)
        sub.error(f"unrecognized arguments: {' '.join(unknown)}")
    if after_dashdash is not None:
        args.script_args = list(args.script_args or []) + ["--", *after_dashdash]
    if args.version:
        from .analysis import __version__

        print(f"ddp-lint {__version__} ({traversal_name()} traversal)")
        return EXIT_CLEAN
    try:
        if args.command == "check":
            return cmd_check(args)
        if args.command == "rule":
            return cmd_rule(args)
        if args.command == "run":
            from .analysis.runtime.cli import cmd_run  # lazy: not on the check path

            return cmd_run(args)
        if args.command == "merge":
            from .analysis.runtime.cli import cmd_merge  # lazy: not on the check path

            return cmd_merge(args)
        if args.command == "explain":
            from .analysis.runtime.cli import cmd_explain  # lazy: not on the check path

            return cmd_explain(args)
        if args.command == "server":
            return cmd_server(args)
        parser.print_help()
        return EXIT_ERROR
    except UsageError as e:
        _err(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_ERROR


def traversal_name() -> str:
    """Which traversal ``analysis.semantic`` runs: "C extension" when its optional compiled module
    loaded, "pure Python" otherwise (the extension absent, not built, or removed)."""
    try:
        from .analysis import semantic
    except Exception:  # pragma: no cover - the package itself is broken
        return "unknown"
    return "C extension" if getattr(semantic, "_speedups", None) is not None else "pure Python"


# -- check -------------------------------------------------------------------------------------
def _codes(s) -> list[str] | None:
    """A flag's codes; a repeated flag (``--select A --select B``) accumulates, as in Ruff."""
    if s is None:
        return None
    if isinstance(s, str):
        s = [s]
    return [c.strip().upper() for part in s for c in part.split(",") if c.strip()]


def _settings_for(args, start: Path):
    """Configuration (discovered, --config, or none with --isolated), then the command line on top:
    ``--select`` replaces the configuration's whole selection (its select and ignore),
    ``--extend-select`` adds codes even when the configuration ignores them, ``--ignore`` drops."""
    from .analysis.config import ConfigError, Settings, load_settings, settings_from_mapping

    files, inline = _config_args(args.config)
    if args.isolated and files:
        raise UsageError("--isolated and --config cannot be used together")
    if len(files) > 1:
        raise UsageError("--config names more than one configuration file")
    try:
        settings = Settings() if args.isolated else load_settings(start, files[0] if files else None)
        for text in inline:
            settings = _inline_override(settings, text)
        exclude, extend_exclude = _globs(args.exclude), _globs(args.extend_exclude)
        if exclude is not None or extend_exclude is not None:
            over: dict = {}
            if exclude is not None:
                over["exclude"] = exclude
            if extend_exclude is not None:
                over["extend-exclude"] = extend_exclude
            settings = _keep_origin(settings_from_mapping(over, source="command line", base=settings), settings)
        select, extend, ignore = _codes(args.select), _codes(args.extend_select), _codes(args.ignore)
        if select is None and extend is None and ignore is None:
            return settings
        overrides: dict = {}
        if select is not None:
            overrides["select"] = select
        else:
            # the configuration's effective selection, as explicit codes: a later layer's
            # extend-select then wins over the configuration's ignore, as in Ruff
            overrides["select"] = sorted(settings.enabled_codes())
        overrides["ignore"] = ignore or []
        overrides["extend-select"] = extend or []
        return _keep_origin(settings_from_mapping(overrides, source="command line", base=settings), settings)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _keep_origin(new, old):
    new.root, new.config_path, new.warnings = old.root, old.config_path, old.warnings
    return new


def _globs(values) -> list[str] | None:
    if values is None:
        return None
    return [g.strip() for v in values for g in v.split(",") if g.strip()]


def _config_args(values) -> tuple[list[str], list[str]]:
    """--config values -> (configuration files, inline ``KEY = VALUE`` overrides). As in Ruff, a
    value that names an existing file is a file; one with ``=`` that does not is TOML."""
    files, inline = [], []
    for v in values or ():
        if "=" in v and not os.path.isfile(v):
            inline.append(v)
        else:
            files.append(v)
    return files, inline


def _inline_override(settings, text: str):
    """``--config 'select = ["DDP001"]'``: one TOML setting on top of the configuration file's."""
    import tomllib

    from .analysis.config import ConfigError, settings_from_mapping

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--config {text!r}: neither a file nor a valid `KEY = VALUE` TOML setting ({e})") from None
    return _keep_origin(settings_from_mapping(data, source=f"--config {text!r}", base=settings), settings)


def _force_excluded(path: str, settings) -> bool:
    """--force-exclude: is this file, or a folder above it (up to the configuration's root or the
    current folder), excluded?"""
    p = Path(path)
    if settings.is_excluded(p):
        return True
    try:
        absp = p.resolve()
    except OSError:
        return False
    base = None
    for cand in (settings.root, Path.cwd()):
        if cand is None:
            continue
        try:
            absp.relative_to(cand.resolve())
            base = cand.resolve()
            break
        except (ValueError, OSError):
            continue
    if base is None:
        return False  # outside the project and the current folder: only the file itself counts
    return any(settings.is_excluded(q) for q in absp.parents if base in q.parents)


def iter_python_files(paths: list[str], settings, respect_gitignore: bool | None = None) -> tuple[list[str], list[str]]:
    """Files to check and errors (the walk lives in analysis/walk.py)."""
    from .analysis.walk import collect_files

    w = collect_files(paths, settings, respect_gitignore)
    return w.files, w.errors


def _check_one(job):
    """Worker: (path, settings, fix_mode, unsafe, write) -> _analyse's tuple + (sourcefile,)."""
    from .analysis.io import SourceError, read_source_file

    path, settings, fix_mode, unsafe, write = job
    try:
        sf = read_source_file(path, keep_digest=write)  # the digest: re-checked before a fix is written
    except SourceError as e:
        return path, [], str(e), None, None, [], None
    return _analyse(sf.text, path, settings, fix_mode, unsafe) + (sf,)


def _analyse_text(text, path, settings, fix_mode, unsafe):
    """-> (path, findings after the fixes, error, new text or None, old text)."""
    return _analyse(text, path, settings, fix_mode, unsafe)[:5]


def _analyse(text, path, settings, fix_mode, unsafe):
    """-> (path, findings after the fixes, error, new text or None, old text, findings before)."""
    from .analysis.engine import check_source
    from .analysis.notebook import NotebookError, check_notebook, is_notebook

    if is_notebook(path):  # the code cells as one module; fixes edit cell sources only
        try:
            findings, new_text, before, _ = check_notebook(text, path, settings, fix_mode, unsafe)
        except NotebookError as e:
            return path, [], str(e), None, None, []
        return path, findings, None, new_text, text, before

    if not str(path).endswith((".py", ".pyi", ".pyw")):  # a launch script named on the command line (DDP701)
        from .analysis.launch_scripts import check_launch_script, looks_like_launch_script

        if looks_like_launch_script(text):
            codes = settings.enabled_codes(path)
            found = [f for f in check_launch_script(text, path) if f.code in codes]
            return path, found, None, None, text, found
    res = check_source(text, path, settings)
    findings = before = res.findings
    new_text = None
    if fix_mode and any(f.fix for f in findings):
        from .analysis.fixes import fix_all

        codes = settings.enabled_codes(path)
        last: list = [None, None]  # the last text fix_all checked, and its findings

        def check(t):
            last[0], last[1] = t, check_source(t, path, settings, codes=codes).findings
            return last[1]

        new_text, _ = fix_all(text, check, unsafe=unsafe, findings=findings)
        if new_text != text:
            # fix_all's last round already analysed the final text: reuse it (one parse per round)
            findings = last[1] if last[0] == new_text else check(new_text)
        else:
            new_text = None
    return path, findings, None, new_text, text, before


def _err(msg: str) -> None:
    from .analysis.output import printable  # a file name's newline or ESC sequence is escaped

    print(printable(f"ddp-lint: error: {msg}"), file=sys.stderr)


def _warn(msg: str) -> None:
    from .analysis.output import printable  # a file name's control characters are escaped

    print(printable(f"ddp-lint: warning: {msg}"), file=sys.stderr)


def _warn_settings(settings) -> None:
    for w in getattr(settings, "warnings", ()):
        _warn(w)


def cmd_check(args) -> int:
    """``check``; with ``--output-file`` what it prints to stdout goes to that file instead."""
    if not args.output_file:
        return _cmd_check(args)
    import contextlib
    import io

    buf = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    with contextlib.redirect_stdout(buf):
        rc = _cmd_check(args)
    buf.flush()
    _write_output_file(args.output_file, buf.buffer.getvalue())
    return rc


def _write_output_file(path: str, data: bytes) -> None:
    """Atomically, through ``io.atomic_write`` (the one writer); never through a symlink."""
    from .analysis.io import SymlinkRefused, atomic_write

    try:
        atomic_write(path, data)
    except SymlinkRefused:
        raise UsageError(f"--output-file {path}: is a symbolic link; refusing to write through it") from None
    except OSError as e:
        raise UsageError(f"--output-file {path}: cannot write: {e.strerror or e}") from None


def _show_settings(settings, first: str) -> None:
    print(f"Settings for {first}:")
    print(f"  configuration file: {settings.config_path or '(none: the defaults)'}")
    print(f"  project root: {settings.root or '(the current folder)'}")
    print(f"  select: {settings.select if settings.select is not None else '(the defaults)'}")
    print(f"  extend-select: {settings.extend_select}")
    print(f"  ignore: {settings.ignore}")
    print(f"  per-file-ignores: {settings.per_file_ignores}")
    print(f"  exclude: {settings.exclude}")
    print(f"  respect-gitignore: {str(settings.respect_gitignore).lower()}")
    print(f"  output-format: {settings.output_format or 'concise'}")
    print(f"  severity: {settings.severity}")
    print(f"  enabled rules: {', '.join(sorted(settings.enabled_codes(first if first != '.' else None)))}")


def _add_noqa(files, settings, tree=None) -> int:
    """--add-noqa: a ``# noqa: CODE`` on the reported line of every finding; -> directives added."""
    from .analysis.engine import check_source
    from .analysis.io import OutsideTree, SourceError, read_source_file, write_source
    from .analysis.noqa import add_noqa_edit

    added = 0
    for path in files:
        try:
            sf = read_source_file(path, keep_digest=True)
        except SourceError as e:
            _err(str(e))
            continue
        findings = [f for f in check_source(sf.text, path, settings).findings if f.code != "DDP000"]
        if not findings:
            continue
        lines = sf.text.splitlines(True)
        by_row: dict[int, list[str]] = {}
        for f in findings:
            if f.noqa_row < len(lines) and f.code not in by_row.setdefault(f.noqa_row, []):
                by_row[f.noqa_row].append(f.code)
        for row, codes in by_row.items():
            line = lines[row]
            body = line.rstrip("\r\n")
            eol = line[len(body):]
            for code in codes:
                e = add_noqa_edit(body, row, code)
                if e is not None:
                    body = body[:e.range.start.column] + e.content + body[e.range.end.column:]
                    added += 1
            lines[row] = body + eol
        new = "".join(lines)
        if new != sf.text:
            try:
                write_source(sf, new, inside=(tree or {}).get(path))
            except OutsideTree as e:  # a repository's symlink out of the folder: reported, not written
                _warn(str(e))
            except SourceError as e:
                _err(str(e))
    return added


def _print_statistics(findings, fmt: str) -> None:
    """--statistics, as Ruff prints it: count, code, [*] when fixable, the rule's name."""
    from .analysis.model import Applicability

    stats: dict[str, list] = {}
    for f in findings:
        row = stats.setdefault(f.code, [0, f.name, False])
        row[0] += 1
        row[2] = row[2] or (f.fix is not None and f.fix.applicability is Applicability.SAFE)
    ordered = sorted(stats.items(), key=lambda kv: (-kv[1][0], kv[0]))
    if fmt == "json":
        import json

        print(json.dumps([{"code": c, "name": n, "count": k, "fixable": fx} for c, (k, n, fx) in ordered], indent=2))
        return
    if not ordered:
        return
    cw = max(len(str(k)) for _, (k, _, _) in ordered)
    kw = max(len(c) for c in stats)
    for c, (k, n, fx) in ordered:
        print(f"{k:>{cw}}\t{c:<{kw}}\t{'[*] ' if fx else ''}{n}")


def _cmd_check(args) -> int:
    from .analysis.output import print_findings, printable

    paths = args.paths or ["."]
    fix_mode = args.fix or args.diff
    results = []  # (path, findings, error, new_text, old_text, findings_before, sourcefile)
    errors: list[str] = []
    tree: dict[str, str] = {}  # walked file -> the real folder of its walk (a fix never leaves it)
    if paths == ["-"]:
        settings = _settings_for(args, Path(args.stdin_filename or ".").parent if args.stdin_filename else Path.cwd())
        _warn_settings(settings)
        if args.show_settings:
            _show_settings(settings, args.stdin_filename or "-")
            return EXIT_CLEAN
        from .analysis.io import SourceError, decode_bytes

        name = args.stdin_filename or "-"
        if args.force_exclude and args.stdin_filename and _force_excluded(args.stdin_filename, settings):
            if args.fix and not args.diff:
                sys.stdout.buffer.write(sys.stdin.buffer.read())  # the filter passes it through
            return EXIT_CLEAN
        try:
            sf = decode_bytes(sys.stdin.buffer.read(), name)
        except SourceError as e:
            _err(str(e))
            return EXIT_ERROR
        r = _analyse(sf.text, name, settings, fix_mode, args.unsafe_fixes)
        results.append(r + (None,))
        stdin_fix_output = args.fix and not args.diff
    else:
        if "-" in paths:
            raise UsageError("'-' (stdin) cannot be combined with other paths")
        stdin_fix_output = False
        settings = _settings_for(args, Path(paths[0]))
        _warn_settings(settings)
        if args.show_settings:
            _show_settings(settings, paths[0])
            return EXIT_CLEAN
        from .analysis.walk import collect_files

        walked = collect_files(paths, settings, args.respect_gitignore)
        files, errors, tree = walked.files, walked.errors, walked.tree
        if args.force_exclude:
            files = [f for f in files if not _force_excluded(f, settings)]
        for w in walked.warnings:
            print(printable(f"ddp-lint: warning: {w}"), file=sys.stderr)
        for e in errors:
            _err(e)
        if not files and not errors and not (args.force_exclude and args.paths):
            # as Ruff: an empty selection is worth a word (a typo in a path, an over-wide exclude)
            print("ddp-lint: warning: no Python files found under the given path(s)", file=sys.stderr)
        if args.show_files:
            for f in sorted(files):
                print(f)
            return EXIT_ERROR if errors else EXIT_CLEAN
        if args.add_noqa:
            n = _add_noqa(files, settings, tree)
            print(f"Added {n} noqa directive{'s' if n != 1 else ''}.", file=sys.stderr)
            return EXIT_ERROR if errors else EXIT_CLEAN
        write = args.fix and not args.diff
        # launch scripts named on the command line (sbatch, shell): DDP701, read here, never fixed
        scripts = [f for f in files if not f.endswith((".py", ".pyi", ".pyw")) and not f.lower().endswith(".ipynb")]
        if scripts:
            files = [f for f in files if f not in scripts]
            results.extend(_check_one((f, settings, False, False, False)) for f in scripts)
        if fix_mode:
            jobs = [(f, settings, fix_mode, args.unsafe_fixes, write) for f in files]
            results.extend(_run_jobs(jobs, args.jobs))
        else:  # compact results from the workers, through the cache (analysis/batch.py)
            results.extend(_check_batch(files, settings, args))
        if errors and not results:
            return EXIT_ERROR
    had_error = any(r[2] for r in results) or bool(errors)
    for r in results:
        if r[2]:
            _err(r[2])
    n_fixed = 0
    n_fixed_findings = 0
    if args.diff:
        import difflib

        for path, findings, err, new, old, *_ in results:
            if new is not None and path.lower().endswith(".ipynb"):
                from .analysis.notebook import cell_diff

                sys.stdout.writelines(cell_diff(old, new, path))  # per cell, as Ruff shows them
            elif new is not None:
                sys.stdout.writelines(difflib.unified_diff(
                    old.splitlines(True), new.splitlines(True), f"a/{printable(path)}", f"b/{printable(path)}"))
        would = sum(max(0, len(r[5]) - len(r[1])) for r in results if r[3] is not None)
        if would and not args.quiet:
            print(f"Would fix {would} error{'s' if would != 1 else ''}.", file=sys.stderr)
        if not any(r[3] is not None for r in results) and not args.quiet:
            n_unsafe = 0 if args.unsafe_fixes else sum(
                1 for r in results for f in r[1] if f.fix and f.fix.applicability.value == "unsafe")
            hint = (f" ({n_unsafe} unsafe fix{'es' if n_unsafe != 1 else ''} can be shown with "
                    "`--unsafe-fixes`)") if n_unsafe else ""
            print(f"No fixes to apply{hint}.", file=sys.stderr)
    elif args.fix:
        from .analysis.io import OutsideTree, SourceError, write_source

        for i, (path, findings, err, new, old, before, sf) in enumerate(results):
            if new is None:
                continue
            if stdin_fix_output:
                n_fixed += 1
                sys.stdout.write(new)
                continue
            try:
                write_source(sf, new, inside=tree.get(path))
                n_fixed += 1
                n_fixed_findings += max(0, len(before) - len(findings))
            except OutsideTree as e:  # a repository's symlink out of the folder: reported, not fixed
                print(printable(f"ddp-lint: warning: {e}"), file=sys.stderr)
                results[i] = (path, before, None, None, old, before, sf)
            except SourceError as e:
                # one line per file; the other files are still fixed, and this one's findings are
                # those of the text that is still on disk
                _err(str(e))
                had_error = True
                results[i] = (path, before, str(e), None, old, before, sf)
    if stdin_fix_output:
        if not any(r[3] is not None for r in results):
            sys.stdout.write(results[0][4] or "")
        remaining = [f for r in results for f in r[1]]
        from .analysis.output import where

        for f in remaining:
            print(printable(f"{where(f)}: {f.code} {f.message}"), file=sys.stderr)
    else:
        all_findings = [f for r in results for f in r[1]] if not args.diff else []
        fmt = _fmt(args.output_format or settings.output_format or "concise")
        if not args.diff and args.statistics:
            _print_statistics(all_findings, fmt)
        elif not args.diff:
            sources = {r[0]: (r[3] if r[3] is not None and r[2] is None else r[4])
                       for r in results if r[4] is not None}
            # never "All checks passed!" next to a file that could not be read
            print_findings(all_findings, fmt, fixed_files=n_fixed,
                           quiet=args.quiet or (had_error and not all_findings),
                           unsafe_hint=not args.unsafe_fixes, sources=sources,
                           fixed_findings=n_fixed_findings if args.fix else None)
    remaining = [f for r in results for f in r[1]]
    if args.diff:
        changed = any(r[3] is not None for r in results)
        return EXIT_ERROR if had_error else (EXIT_FINDINGS if changed else EXIT_CLEAN)
    if had_error:
        return EXIT_ERROR
    if remaining and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _check_batch(files, settings, args):
    """Check without fixes: chunked workers, compact results, the findings cache. -> the tuples of
    ``results`` (no texts, except for the ``full`` format's source lines of files with findings)."""
    from .analysis.batch import check_files

    cache = None
    if not args.no_cache and files:
        from .analysis.cache import Cache, cache_folder

        cache = Cache(args.cache_dir or cache_folder(settings), settings)
    full = _fmt(args.output_format or settings.output_format or "concise") == "full"
    out = []
    for path, findings, err in check_files(files, settings, args.jobs, cache):
        old = None
        if full and findings:
            from .analysis.io import SourceError, read_source_file

            try:
                old = read_source_file(path).text
            except SourceError:
                pass
        out.append((path, findings, err, None, old, findings, None))
    return out


def _fmt(name: str) -> str:
    return "concise" if name == "text" else name


def _run_jobs(jobs, n_jobs: int):
    n = n_jobs or os.cpu_count() or 1
    if len(jobs) < 16 or n <= 1:
        return [_check_one(j) for j in jobs]
    import concurrent.futures as cf
    import multiprocessing as mp

    try:
        ctx = mp.get_context("fork")
    except ValueError:  # pragma: no cover - non-POSIX
        ctx = None
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx) as ex:
        return list(ex.map(_check_one, jobs, chunksize=max(1, len(jobs) // (n * 8))))


# -- rule --------------------------------------------------------------------------------------
def cmd_rule(args) -> int:
    from .analysis.registry import all_rules, get_rule

    if args.all:
        rules = all_rules()
        if args.output_format == "json":
            import json

            print(json.dumps([_rule_json(r) for r in rules.values()], indent=2))
        else:
            print(f"{'code':<8}{'name':<36}{'severity':<10}{'default':<9}fix")
            for r in rules.values():
                print(f"{r.code:<8}{r.name:<36}{r.severity.value:<10}{'on' if r.default_enabled else 'off':<9}{r.fix_availability}")
        return EXIT_CLEAN
    if not args.code:
        raise UsageError("give a rule code (e.g. `ddp-lint rule DDP001`) or --all")
    rule = get_rule(args.code)
    if rule is None:  # by name, as Ruff accepts: `ddp-lint rule nccl-without-set-device`
        want = args.code.strip().lower().replace("_", "-")
        rule = next((r for r in all_rules().values() if r.name == want), None)
    if rule is None:
        raise UsageError(f"unknown rule code or name {args.code!r}; "
                         "`ddp-lint rule --all` lists them")
    if args.output_format == "json":
        import json

        print(json.dumps(_rule_json(rule), indent=2))
    else:
        print(rule.render_docs(), end="")
    return EXIT_CLEAN


def _rule_json(r):
    return {"code": r.code, "name": r.name, "severity": r.severity.value, "default_enabled": r.default_enabled,
            "fix": r.fix_availability, "url": r.url(), "explanation": r.docs()}


# -- server ------------------------------------------------------------------------------------
def cmd_server(args) -> int:
    try:
        from .lsp_server.server import start  # lazy: pygls only here
    except ImportError as e:
        raise UsageError(f"the language server needs pygls and lsprotocol: {e}") from None
    tcp = None
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not port.isdigit():
            raise UsageError(f"--tcp expects HOST:PORT, got {args.tcp!r}")
        tcp = (host or "127.0.0.1", int(port))
    return start(tcp=tcp, log_level=args.log_level, socket_path=args.socket,
                 allow_run=args.allow_run) or EXIT_CLEAN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
