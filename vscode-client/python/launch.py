"""Start the VS Code extension's bundled ddp-lint language server, or probe the interpreter.

The extension runs this file by its absolute path, from the extension's own folder, as

    <python> -I <extension>/vscode-client/python/launch.py            # the server (stdio)
    <python> -I <extension>/vscode-client/python/launch.py --probe    # one JSON line, then exit

``-I`` (isolated mode) keeps the current folder, this file's folder, the user's site-packages and
every PYTHON* variable (PYTHONPATH, PYTHONSTARTUP, ...) out of the interpreter, so a package in
the workspace (``ddp_lint/``, ``lsp_server/``, ``pygls/``, a ``sitecustomize.py``...) is never
imported in place of the server or its libraries, in a trusted or an untrusted workspace alike.
This file then puts the extension's own sources and its bundled libraries first on ``sys.path``,
explicitly; nothing else is added.

Kept free of f-strings and newer syntax, so that a too-old Python still runs ``--probe`` and the
extension can say which version it found.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the extension folder: ddp_lint/, analysis/, lsp_server/
LIBS = os.path.join(ROOT, "bundled", "libs")   # pygls, lsprotocol, cattrs, attrs, ... (pure Python)
NEEDED = ("pygls", "lsprotocol", "cattrs", "ddp_lint.lsp_server", "ddp_lint.analysis")


def _set_path():
    cwd = os.path.realpath(os.getcwd())
    # without -I (a Python that ignored it), '' and the working folder would be first: drop them
    rest = [p for p in sys.path if p and os.path.realpath(p) not in (cwd, HERE)]
    ours = [ROOT] + ([LIBS] if os.path.isdir(LIBS) else [])
    sys.path[:] = ours + [p for p in rest if p not in ours]


def _probe():
    import importlib.util
    import json
    missing = []
    origins = {}
    for name in NEEDED:
        try:
            spec = importlib.util.find_spec(name)
        except Exception:
            spec = None
        if spec is None:
            missing.append(name)
        else:
            origins[name] = spec.origin
    print(json.dumps({
        "version": list(sys.version_info[:3]),
        "executable": sys.executable,
        "missing": missing,
        "origins": origins,
        "isolated": bool(getattr(sys.flags, "isolated", 0)),
        "bundled": os.path.isdir(LIBS),
    }))
    return 0


def main():
    _set_path()
    if sys.argv[1:2] == ["--probe"]:
        return _probe()
    for stream in (sys.stderr,):  # PYTHONIOENCODING is ignored under -I: log in UTF-8 anyway
        try:
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    from ddp_lint.lsp_server.__main__ import main as server_main
    return server_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
