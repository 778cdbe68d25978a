"""``python -m ddp_lint.lsp_server [--tcp HOST:PORT [--allow-run] | --socket PATH] [--log-level LEVEL]``:
the ddp-lint language server."""
from __future__ import annotations

import argparse
import sys

TCP_HELP = ("listen on a TCP address instead of stdio; any local user can connect to it, so the server "
            "then runs no code and reads no file a client names (see SECURITY.md)")
ALLOW_RUN_HELP = ("with --tcp: allow ddp-lint.run and the run.* settings anyway; every local user who can "
                  "connect can then run code as you")
SOCKET_HELP = "listen on a Unix socket created at PATH with mode 0600 (only you can connect; runs allowed)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddp_lint.lsp_server", description="ddp-lint language server")
    p.add_argument("--stdio", action="store_true", help="use stdio (the default)")
    p.add_argument("--tcp", metavar="HOST:PORT", help=TCP_HELP)
    p.add_argument("--allow-run", action="store_true", help=ALLOW_RUN_HELP)
    p.add_argument("--socket", metavar="PATH", help=SOCKET_HELP)
    p.add_argument("--log-level", default=None, help="error, warning, info (default) or debug")
    args = p.parse_args(argv)
    tcp = None
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            p.error(f"--tcp expects HOST:PORT, got {args.tcp!r}")
        tcp = (host or "127.0.0.1", int(port))
    from .server import start

    return start(tcp=tcp, log_level=args.log_level, socket_path=args.socket, allow_run=args.allow_run)


if __name__ == "__main__":
    sys.exit(main())
