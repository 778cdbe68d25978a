// Package-time step (like microsoft/vscode-python-tools-extension-template): install the server's
// pure-Python dependencies into bundled/libs with pip, so that the .vsix runs for a user who never
// pip-installed ddp-lint; the extension itself never runs pip. Every requirement is pinned with its
// wheel's sha256 (bundled-requirements.txt) and installed with --require-hashes. The server's own
// sources (ddp_lint/, analysis/, lsp_server/) are shipped as they are at the extension root.
// Python: $PYTHON, else python3.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const libs = path.join(root, 'bundled', 'libs');
const reqFile = path.join(root, 'vscode-client', 'bundled-requirements.txt');
const python = process.env.PYTHON || 'python3';

const stamp = path.join(libs, '.requirements');
const wanted = fs.readFileSync(reqFile, 'utf8');
if (fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8') === wanted && !process.argv.includes('--force')) {
    console.log(`bundled/libs is up to date (${reqFile})`);
    process.exit(0);
}
fs.rmSync(libs, { recursive: true, force: true });
fs.mkdirSync(libs, { recursive: true });
// Pure-Python wheels for the oldest supported Python (3.10): markers then pull in tomli and
// exceptiongroup too, which are inert on newer Pythons. No compiled code: works on any platform.
const args = ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '--no-compile',
    '--target', libs, '--implementation', 'py', '--python-version', '3.10', '--platform', 'any',
    '--abi', 'none', '--only-binary=:all:', '--require-hashes', '-r', reqFile];
console.log(`${python} ${args.join(' ')}`);
const r = spawnSync(python, args, { stdio: 'inherit' });
if (r.status !== 0) {
    console.error(`pip failed (${r.error?.message ?? `exit ${r.status}`}): cannot bundle the Python dependencies`);
    process.exit(1);
}
// pip's own metadata and console scripts are not needed at run time
for (const name of fs.readdirSync(libs)) {
    if (name === 'bin' || name === '__pycache__') fs.rmSync(path.join(libs, name), { recursive: true, force: true });
}
fs.writeFileSync(stamp, wanted);
console.log(`bundled into ${libs}: ${fs.readdirSync(libs).filter((n) => !n.endsWith('.dist-info') && !n.startsWith('.')).join(', ')}`);
