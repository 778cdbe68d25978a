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
  2. [tool.ddp-lint] in the nearest pyproject.toml at or above the first PATH
     (or the file given with --config; --isolated ignores every configuration file);
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
    c.add_argument("--output-format", choices=OUTPUT_FORMATS, default="concise", metavar="FORMAT",
                   help="concise (default), full, json, sarif, github or junit; see below")
    c.add_argument("--fix", action="store_true", help="apply safe fixes")
    c.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes (with --fix/--diff)")
    c.add_argument("--diff", action="store_true", help="print the fixes as a diff; write nothing")
    c.add_argument("--select", metavar="CODES", help="comma-separated codes or prefixes; replaces the default set and "
                                    "the configuration's select and ignore")
    c.add_argument("--extend-select", metavar="CODES", help="comma-separated codes or prefixes to add (wins over the "
                                           "configuration's ignore)")
    c.add_argument("--ignore", metavar="CODES", help="comma-separated codes or prefixes to drop")
    c.add_argument("--config", metavar="PATH",
                   help="use this pyproject.toml (or a ddp-lint.toml with the keys at top level) "
                        "instead of discovery")
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
    args = parser.parse_args(argv)
    if after_dashdash is not None:
        args.script_args = list(args.script_args or []) + ["--", *after_dashdash]
    if args.version:
        from .analysis import __version__

        print(f"ddp-lint {__version__}")
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


# -- check -------------------------------------------------------------------------------------
def _codes(s: str | None) -> list[str] | None:
    if s is None:
        return None
    return [c.strip().upper() for c in s.split(",") if c.strip()]


def _settings_for(args, start: Path):
    """Configuration (discovered, --config, or none with --isolated), then the command line on top:
    ``--select`` replaces the configuration's whole selection (its select and ignore),
    ``--extend-select`` adds codes even when the configuration ignores them, ``--ignore`` drops."""
    from .analysis.config import ConfigError, Settings, load_settings, settings_from_mapping

    if args.isolated and args.config:
        raise UsageError("--isolated and --config cannot be used together")
    try:
        settings = Settings() if args.isolated else load_settings(start, args.config)
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
        root = settings.root
        settings = settings_from_mapping(overrides, source="command line", base=settings)
        settings.root = root
        return settings
    except ConfigError as e:
        raise UsageError(str(e)) from None


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


def cmd_check(args) -> int:
    from .analysis.output import print_findings, printable

    paths = args.paths or ["."]
    fix_mode = args.fix or args.diff
    results = []  # (path, findings, error, new_text, old_text, findings_before, sourcefile)
    errors: list[str] = []
    tree: dict[str, str] = {}  # walked file -> the real folder of its walk (a fix never leaves it)
    if paths == ["-"]:
        settings = _settings_for(args, Path(args.stdin_filename or ".").parent if args.stdin_filename else Path.cwd())
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
        from .analysis.walk import collect_files

        walked = collect_files(paths, settings, args.respect_gitignore)
        files, errors, tree = walked.files, walked.errors, walked.tree
        if args.force_exclude:
            files = [f for f in files if not _force_excluded(f, settings)]
        for w in walked.warnings:
            print(printable(f"ddp-lint: warning: {w}"), file=sys.stderr)
        for e in errors:
            _err(e)
        write = args.fix and not args.diff
        # launch scripts named on the command line (sbatch, shell): DDP701, read here, never fixed
        scripts = [f for f in files if not f.endswith((".py", ".pyi", ".pyw"))]
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
    if args.diff:
        import difflib

        for path, findings, err, new, old, *_ in results:
            if new is not None:
                sys.stdout.writelines(difflib.unified_diff(
                    old.splitlines(True), new.splitlines(True), f"a/{printable(path)}", f"b/{printable(path)}"))
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
        for f in remaining:
            print(printable(f"{f.filename}:{f.range.start.line + 1}:{f.range.start.column + 1}: {f.code} {f.message}"),
                  file=sys.stderr)
    else:
        all_findings = [f for r in results for f in r[1]] if not args.diff else []
        if not args.diff:
            sources = {r[0]: (r[3] if r[3] is not None and r[2] is None else r[4])
                       for r in results if r[4] is not None}
            # never "All checks passed!" next to a file that could not be read
            print_findings(all_findings, _fmt(args.output_format), fixed_files=n_fixed,
                           quiet=args.quiet or (had_error and not all_findings),
                           unsafe_hint=not args.unsafe_fixes, sources=sources)
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

        cache = Cache(cache_folder(settings), settings)
    full = _fmt(args.output_format) == "full"
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
