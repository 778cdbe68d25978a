"""The ddp-lint server without its ``ddp-lint.explain`` command (as a build without the explain
feature would be): the code lenses offer "Explain a failed job…" only where the server has it."""
import sys

from ddp_lint.lsp_server import server as srv

_create = srv.create_server


def create_server(*args, **kwargs):
    s = _create(*args, **kwargs)
    s.protocol.fm.commands.pop("ddp-lint.explain", None)
    return s


srv.create_server = create_server
sys.exit(srv.start())
