"""``python -m ddp_lint.lsp_server [--tcp HOST:PORT] [--log-level LEVEL]``: the ddp-lint language server."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddp_lint.lsp_server", description="ddp-lint language server")
    p.add_argument("--stdio", action="store_true", help="use stdio (the default)")
    p.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP address instead of stdio")
    p.add_argument("--log-level", default=None, help="error, warning, info (default) or debug")
    args = p.parse_args(argv)
    tcp = None
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            p.error(f"--tcp expects HOST:PORT, got {args.tcp!r}")
        tcp = (host or "127.0.0.1", int(port))
    from .server import start

    return start(tcp=tcp, log_level=args.log_level)


if __name__ == "__main__":
    sys.exit(main())
