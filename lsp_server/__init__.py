"""ddp-lint's language server: a thin pygls 2.x adapter over ``analysis``.

Start it with ``ddp-lint server`` (stdio; ``--tcp HOST:PORT``) or ``python -m ddp_lint.lsp_server``;
``lsp_server.server.start(tcp=None, log_level=None)`` is the entry point both use. See
docs/editors.md.
"""
