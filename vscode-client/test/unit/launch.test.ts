// How the extension starts Python (issue 12, items 3 and 6): by the launcher's absolute path, in
// isolated mode, from the extension's folder; never `-m`, never the workspace folder, never pip.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { judgeProbe, parseProbe, resolveInterpreter } from '../../src/interpreter';
import {
    interpreterInsideWorkspace, launcherPath, probeLaunch, serverEnv, serverLaunch,
} from '../../src/launch';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const EXT = '/home/u/.vscode/extensions/ddp-lint.ddp-lint-0.1.0';
const LAUNCHER = `${EXT}/vscode-client/python/launch.py`;

test('the server starts by script path, isolated, from the extension folder', () => {
    const l = serverLaunch(['/ws/../usr/bin/python3'], EXT);
    assert.equal(l.command, '/ws/../usr/bin/python3');
    assert.deepEqual(l.args, ['-I', '-u', LAUNCHER]);
    assert.equal(l.cwd, EXT);
    assert.ok(!l.args.includes('-m') && !l.args.includes('-c'));
});

test('the probe goes through the same launcher, isolated', () => {
    const l = probeLaunch(['python3'], EXT);
    assert.deepEqual(l.args, ['-I', '-u', LAUNCHER, '--probe']);
    assert.equal(l.cwd, EXT);
});

test('an interpreter command with arguments keeps them before the isolation flags', () => {
    const l = serverLaunch(['conda', 'run', '-n', 'ml', 'python'], EXT);
    assert.equal(l.command, 'conda');
    assert.deepEqual(l.args, ['run', '-n', 'ml', 'python', '-I', '-u', LAUNCHER]);
    assert.throws(() => serverLaunch([], EXT));
    assert.throws(() => serverLaunch(['python3'], 'relative/ext'));
});

test('the server environment adds no PYTHONPATH and keeps the user\'s as it is', () => {
    const env = serverEnv({ PATH: '/bin', PYTHONPATH: '/user/lib', DDP_LINT_BUNDLE_PATHS: '["/x"]' });
    assert.equal(env.PYTHONPATH, '/user/lib');
    assert.equal(env.PATH, '/bin');
    assert.equal(env.DDP_LINT_BUNDLE_PATHS, undefined);
    assert.equal(serverEnv({}).PYTHONPATH, undefined);
});

test('an interpreter inside a workspace folder is recognised (refused in Restricted Mode)', () => {
    const folders = ['/work/repo', '/work/other'];
    assert.equal(interpreterInsideWorkspace(['/work/repo/.venv/bin/python'], folders), '/work/repo');
    assert.equal(interpreterInsideWorkspace(['/work/other/py'], folders), '/work/other');
    assert.equal(interpreterInsideWorkspace(['/work/repository/bin/python'], folders), undefined);
    assert.equal(interpreterInsideWorkspace(['/usr/bin/python3'], folders), undefined);
    assert.equal(interpreterInsideWorkspace(['python3'], folders), undefined);
    // a symlink out of the workspace still counts (its pyvenv.cfg and site-packages are the workspace's) ...
    assert.equal(interpreterInsideWorkspace(['/work/repo/.venv/bin/python'], folders, () => '/usr/bin/python3.11'), '/work/repo');
    // ... and so does a link into it
    assert.equal(interpreterInsideWorkspace(['/home/u/py'], folders, (p) => (p === '/home/u/py' ? '/work/repo/py' : p)), '/work/repo');
});

test('a rejected Python-extension interpreter falls back to the setting, with a log line', async () => {
    const logs: string[] = [];
    const r = await resolveInterpreter({
        pythonExtension: async () => ['/ws/.venv/bin/python'],
        setting: () => ['/usr/bin/python3'],
        log: (m) => logs.push(m),
        reject: (c) => (c[0].startsWith('/ws/') ? 'inside the untrusted workspace' : undefined),
    });
    assert.deepEqual(r, { command: ['/usr/bin/python3'], source: 'setting' });
    assert.match(logs.join('\n'), /not using the Python extension's interpreter \/ws\/\.venv\/bin\/python: inside the untrusted workspace/);
});

test('missing modules: a clear message, and never an install', () => {
    const v = (missing: string[], bundled: boolean) => judgeProbe(['py'], undefined, 0,
        JSON.stringify({ version: [3, 11, 0], executable: '/p', missing, bundled }), '');
    const ours = v(['ddp_lint.lsp_server'], true);
    assert.match(!ours.ok ? ours.message : '', /damaged.*ddp_lint\.lsp_server.*Reinstall/);
    const nolibs = v(['pygls'], false);
    assert.match(!nolibs.ok ? nolibs.message : '', /bundled Python libraries \(bundled\/libs\) are missing.*pygls.*npm run bundle-python/);
    const libs = v(['pygls'], true);
    assert.match(!libs.ok ? libs.message : '', /cannot import pygls, even from the extension's bundled libraries/);
    for (const r of [ours, nolibs, libs]) assert.doesNotMatch(!r.ok ? r.message : '', /\bpip\b|installing/i);
});

test('the extension never runs pip (issue 12, item 6): no pip invocation in its sources', () => {
    const dir = path.join(ROOT, 'vscode-client', 'src');
    for (const f of fs.readdirSync(dir).filter((n) => n.endsWith('.ts'))) {
        const code = fs.readFileSync(path.join(dir, f), 'utf8')
            .replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
        assert.doesNotMatch(code, /['"`]pip['"`]|pip install|ensurepip|--require-hashes|--target/, `${f} runs pip`);
    }
});

// The launcher itself, under a real Python, from a hostile working folder with a hostile PYTHONPATH.
test('the launcher imports nothing from the working folder or PYTHONPATH', (t) => {
    const python = process.env.PYTHON || 'python3';
    if (spawnSync(python, ['--version']).status !== 0) {
        if (process.env.DDP_LINT_REQUIRE_ALL === '1') assert.fail(`${python} not found`);
        t.skip(`${python} not found`);
        return;
    }
    const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'ddp-lint-ws-'));
    const marker = path.join(ws, 'MARKER');
    try {
        const plant = `open(${JSON.stringify(marker)}, "a").write(__name__ + "\\n")\n`;
        for (const pkg of ['pygls', 'ddp_lint', 'lsp_server', 'lsprotocol', 'cattrs', 'attrs']) {
            fs.mkdirSync(path.join(ws, pkg));
            fs.writeFileSync(path.join(ws, pkg, '__init__.py'), plant);
        }
        for (const mod of ['sitecustomize', 'usercustomize', 'json', 'importlib_metadata']) {
            fs.writeFileSync(path.join(ws, `${mod}.py`), plant);
        }
        fs.writeFileSync(path.join(ws, 'startup.py'), plant);
        const l = probeLaunch([python], ROOT);
        // the cwd a careless client would use, and the user's environment pointing into it
        const r = spawnSync(l.command, l.args, {
            cwd: ws, encoding: 'utf8', timeout: 60_000,
            env: { ...serverEnv(process.env), PYTHONPATH: ws, PYTHONSTARTUP: path.join(ws, 'startup.py'), PYTHONHOME: undefined },
        });
        assert.equal(r.status, 0, r.stderr);
        const probe = parseProbe(r.stdout);
        assert.ok(probe, r.stdout);
        assert.ok(!fs.existsSync(marker), `workspace code ran: ${fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8') : ''}`);
        const origins = JSON.parse(r.stdout.trim().split('\n').pop() as string).origins as Record<string, string>;
        assert.ok(origins['ddp_lint.lsp_server'].startsWith(path.join(ROOT, 'lsp_server')), origins['ddp_lint.lsp_server']);
        for (const o of Object.values(origins)) assert.ok(!o.startsWith(ws), o);
        assert.equal(launcherPath(ROOT), path.join(ROOT, 'vscode-client', 'python', 'launch.py'));
    } finally {
        fs.rmSync(ws, { recursive: true, force: true });
    }
});

test('the bundled libraries are pinned with hashes and installed with --require-hashes', () => {
    const req = fs.readFileSync(path.join(ROOT, 'vscode-client', 'bundled-requirements.txt'), 'utf8')
        .replace(/\\\n/g, ' ').split('\n').map((l) => l.replace(/#.*/, '').trim()).filter(Boolean);
    assert.ok(req.length >= 5, req.join('\n'));
    for (const line of req) {
        assert.match(line, /^[A-Za-z0-9._-]+==[0-9][^\s;]*\s+(--hash=sha256:[0-9a-f]{64}\s*)+$/, `not pinned with a hash: ${line}`);
    }
    for (const name of ['pygls', 'lsprotocol', 'cattrs', 'attrs']) {
        assert.ok(req.some((l) => l.startsWith(`${name}==`)), `${name} not bundled`);
    }
    const script = fs.readFileSync(path.join(ROOT, 'vscode-client', 'scripts', 'bundle-python.mjs'), 'utf8');
    assert.match(script, /'--require-hashes'/);
    const ignore = fs.readFileSync(path.join(ROOT, '.vscodeignore'), 'utf8').split('\n');
    assert.ok(ignore.includes('!bundled/libs/**/*.py') && ignore.includes('!vscode-client/python/launch.py'), 'not packaged');
});
