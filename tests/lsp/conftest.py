"""Fixtures for the language-server tests; the helpers live in ``lsp_helpers``."""
from lsp_helpers import lsp_session  # noqa: F401  (pytest fixture)
