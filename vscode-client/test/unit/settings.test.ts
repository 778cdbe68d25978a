import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigLike, DEFAULTS, readSettings, settingsKey, toServerSettings } from '../../src/settings';

function config(values: Record<string, unknown>): ConfigLike {
    return { get: <T>(key: string) => values[key] as T | undefined };
}

test('defaults when nothing is set', () => {
    const { settings, problems } = readSettings(config({}));
    assert.deepEqual(settings, DEFAULTS);
    assert.deepEqual(problems, []);
    assert.deepEqual(toServerSettings(settings), {
        enable: true, select: null, ignore: [], severity: {}, lintOnChange: true, debounceMs: 150,
        interpreter: [], logLevel: 'info',
        run: { nproc: null, timeoutSeconds: 60, emulate: 'auto', args: [] }, codeLens: true,
    });
});

test('every setting is mapped, codes upper-cased, run.* nested', () => {
    const { settings, problems } = readSettings(config({
        enable: false, select: ['ddp1', ' DDP001 '], ignore: ['ddp101'], severity: { ddp101: 'Warning' },
        lintOnChange: false, debounceMs: 400, interpreter: ['/venv/bin/python', '-X', 'utf8'],
        logLevel: 'debug', 'run.nproc': 4, 'run.timeoutSeconds': 12.5, 'run.emulate': 'on',
        'run.args': ['--epochs', '1'], codeLens: false,
    }));
    assert.deepEqual(problems, []);
    assert.deepEqual(toServerSettings(settings), {
        enable: false, select: ['DDP1', 'DDP001'], ignore: ['DDP101'], severity: { DDP101: 'warning' },
        lintOnChange: false, debounceMs: 400, interpreter: ['/venv/bin/python', '-X', 'utf8'],
        logLevel: 'debug', run: { nproc: 4, timeoutSeconds: 12.5, emulate: 'on', args: ['--epochs', '1'] },
        codeLens: false,
    });
});

test('a string interpreter is accepted as a one-element command', () => {
    const { settings } = readSettings(config({ interpreter: ' /usr/bin/python3 ' }));
    assert.deepEqual(settings.interpreter, ['/usr/bin/python3']);
});

test('invalid values fall back to the default and name the key', () => {
    const { settings, problems } = readSettings(config({
        enable: 'yes', select: 'DDP1', ignore: [1, 2], severity: { DDP101: 'fatal', DDP001: 'hint' },
        debounceMs: -5, logLevel: 'chatty', 'run.nproc': 2.5, 'run.timeoutSeconds': 0, 'run.emulate': 'maybe',
        'run.args': 'not-a-list-but-ok',
    }));
    assert.equal(settings.enable, true);
    assert.deepEqual(settings.select, ['DDP1']); // a single string is a one-element list
    assert.deepEqual(settings.ignore, []);
    assert.deepEqual(settings.severity, { DDP001: 'hint' });
    assert.equal(settings.debounceMs, 150);
    assert.equal(settings.logLevel, 'info');
    assert.equal(settings.run.nproc, null);
    assert.equal(settings.run.timeoutSeconds, 60);
    assert.equal(settings.run.emulate, 'auto');
    assert.deepEqual(settings.run.args, ['not-a-list-but-ok']);
    const keys = problems.map((p) => p.key).sort();
    assert.deepEqual(keys, ['debounceMs', 'enable', 'ignore', 'logLevel', 'run.emulate', 'run.nproc',
        'run.timeoutSeconds', 'severity']);
    for (const p of problems) assert.match(p.message, new RegExp(`ddp-lint\\.${p.key.replace('.', '\\.')}`));
});

test('settingsKey changes exactly when an effective value changes', () => {
    const a = readSettings(config({ select: ['DDP1'] })).settings;
    const b = readSettings(config({ select: ['ddp1'] })).settings;
    const c = readSettings(config({ select: ['DDP1'], 'run.nproc': 2 })).settings;
    assert.equal(settingsKey(a), settingsKey(b));
    assert.notEqual(settingsKey(a), settingsKey(c));
});

test('toServerSettings returns copies (the server object cannot alias the settings)', () => {
    const s = readSettings(config({ ignore: ['DDP1'] })).settings;
    const out = toServerSettings(s) as { ignore: string[] };
    out.ignore.push('X');
    assert.deepEqual(s.ignore, ['DDP1']);
});
