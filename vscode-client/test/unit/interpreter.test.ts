import assert from 'node:assert/strict';
import { test } from 'node:test';
import { judgeProbe, parseProbe, resolveInterpreter, versionOk } from '../../src/interpreter';

const src = (ext: string[] | undefined | Error, setting: string[]) => {
    const calls: string[] = [];
    return {
        calls,
        sources: {
            pythonExtension: async () => {
                calls.push('ext');
                if (ext instanceof Error) throw ext;
                return ext;
            },
            setting: () => {
                calls.push('setting');
                return setting;
            },
            log: (m: string) => calls.push(`log:${m}`),
        },
    };
};

test('the Python extension selection wins over the setting', async () => {
    const { sources, calls } = src(['/ext/python'], ['/setting/python']);
    assert.deepEqual(await resolveInterpreter(sources), { command: ['/ext/python'], source: 'python-extension' });
    assert.deepEqual(calls, ['ext']);
});

test('without the Python extension: the ddp-lint.interpreter setting', async () => {
    const { sources } = src(undefined, ['/setting/python', '-X', 'utf8']);
    assert.deepEqual(await resolveInterpreter(sources),
        { command: ['/setting/python', '-X', 'utf8'], source: 'setting' });
});

test('an empty selection from the extension falls through to the setting', async () => {
    const { sources } = src([], ['/setting/python']);
    assert.equal((await resolveInterpreter(sources)).source, 'setting');
    const { sources: s2 } = src([''], ['/setting/python']);
    assert.equal((await resolveInterpreter(s2)).source, 'setting');
});

test('neither: python3', async () => {
    const { sources } = src(undefined, []);
    assert.deepEqual(await resolveInterpreter(sources), { command: ['python3'], source: 'default' });
    const { sources: s2 } = src(undefined, ['']);
    assert.deepEqual(await resolveInterpreter(s2), { command: ['python3'], source: 'default' });
});

test('a failing Python extension API is logged and skipped, never fatal', async () => {
    const { sources, calls } = src(new Error('boom'), []);
    assert.deepEqual(await resolveInterpreter(sources), { command: ['python3'], source: 'default' });
    assert.ok(calls.some((c) => c.startsWith('log:') && c.includes('boom')));
});

test('probe output parsing ignores noise before the JSON line', () => {
    const out = 'sitecustomize says hi\n{"version": [3, 11, 4], "executable": "/p", "missing": []}\n';
    assert.deepEqual(parseProbe(out), { version: [3, 11, 4], executable: '/p', missing: [], bundled: true });
    assert.equal(parseProbe('garbage\n{not json'), undefined);
});

test('version check: 3.10 is the minimum', () => {
    assert.ok(versionOk([3, 10, 0]));
    assert.ok(versionOk([3, 13, 1]));
    assert.ok(versionOk([4, 0, 0]));
    assert.ok(!versionOk([3, 9, 18]));
    assert.ok(!versionOk([2, 7, 18]));
});

test('probe verdicts: not found, too old, broken, missing modules, ok', () => {
    const nf = judgeProbe(['/nope/python'], 'ENOENT', null, '', '');
    assert.equal(nf.ok, false);
    assert.equal(!nf.ok && nf.kind, 'not-found');
    assert.match(!nf.ok ? nf.message : '', /No Python interpreter found at `\/nope\/python`/);

    const old = judgeProbe(['py'], undefined, 0, '{"version":[3,8,10],"executable":"/usr/bin/python3.8","missing":[]}', '');
    assert.equal(!old.ok && old.kind, 'too-old');
    assert.match(!old.ok ? old.message : '', /3\.8\.10 .* too old: ddp-lint needs Python 3\.10/);

    const broken = judgeProbe(['python2'], undefined, 1, '', '  File "<string>", line 1\nSyntaxError: invalid syntax\n');
    assert.equal(!broken.ok && broken.kind, 'broken');
    assert.match(!broken.ok ? broken.message : '', /SyntaxError/);

    const missing = judgeProbe(['py'], undefined, 0, '{"version":[3,11,0],"executable":"/p","missing":["pygls"]}', '');
    assert.equal(!missing.ok && missing.kind, 'missing-modules');

    const ok = judgeProbe(['py'], undefined, 0, '{"version":[3,11,0],"executable":"/p","missing":[]}', '');
    assert.equal(ok.ok, true);
});
