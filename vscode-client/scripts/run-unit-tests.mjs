// `npm test`'s runner: the compiled unit tests (out/test/unit/*.test.js) under `node --test`.
// The files are listed here rather than by a quoted glob on the command line, which only Node 21+
// expands itself (and a shell never does, once quoted): an empty match is an error, not a pass.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = path.join(root, 'out', 'test', 'unit');
const files = fs.existsSync(dir)
    ? fs.readdirSync(dir).filter((n) => n.endsWith('.test.js')).sort().map((n) => path.join(dir, n))
    : [];
if (files.length === 0) {
    console.error(`no unit tests found in ${dir} (did \`tsc -p vscode-client/tsconfig.test.json\` run?)`);
    process.exit(1);
}
const r = spawnSync(process.execPath, ['--test', '--test-timeout=20000', ...files], { stdio: 'inherit', cwd: root });
process.exit(r.status ?? 1);
