/**
 * Which Python runs the server. Order (issue 7): the interpreter the Python extension has
 * selected (through its API), else the `ddp-lint.interpreter` setting, else `python3`.
 *
 * Pure: the sources are injected, so that the order is unit-tested in plain Node.
 */

export const MIN_PYTHON: readonly [number, number] = [3, 10];

export type InterpreterSource = 'python-extension' | 'setting' | 'default';

export interface ResolvedInterpreter {
    /** argv prefix: `[...command, '-m', 'ddp_lint.lsp_server']` starts the server. */
    command: string[];
    source: InterpreterSource;
}

export interface InterpreterSources {
    /** `undefined` when the Python extension is not installed or has no usable selection. */
    pythonExtension(): Promise<string[] | undefined>;
    /** The `ddp-lint.interpreter` setting (already trimmed; empty when unset). */
    setting(): string[];
    /** Logged when a source fails, so a broken Python extension never blocks the server. */
    log?(message: string): void;
}

export const DEFAULT_INTERPRETER: readonly string[] = ['python3'];

export async function resolveInterpreter(sources: InterpreterSources): Promise<ResolvedInterpreter> {
    try {
        const fromExt = await sources.pythonExtension();
        if (fromExt && fromExt.length > 0 && fromExt[0]) {
            return { command: [...fromExt], source: 'python-extension' };
        }
    } catch (e) {
        sources.log?.(`Python extension API failed, falling back: ${e instanceof Error ? e.message : String(e)}`);
    }
    const setting = sources.setting().filter((s) => s.length > 0);
    if (setting.length > 0) {
        return { command: setting, source: 'setting' };
    }
    return { command: [...DEFAULT_INTERPRETER], source: 'default' };
}

/** The one-line probe run before starting the server: version and the modules it needs. */
export const PROBE_SCRIPT = [
    'import json, sys, importlib.util',
    'mods = ("pygls", "lsprotocol", "cattrs", "ddp_lint.lsp_server", "ddp_lint.analysis")',
    'missing = []',
    'for m in mods:',
    '    try:',
    '        ok = importlib.util.find_spec(m) is not None',
    '    except Exception:',
    '        ok = False',
    '    if not ok: missing.append(m)',
    'print(json.dumps({"version": list(sys.version_info[:3]), "executable": sys.executable, "missing": missing}))',
].join('\n');

export interface ProbeResult {
    version: [number, number, number];
    executable: string;
    missing: string[];
}

export type ProbeVerdict =
    | { ok: true; probe: ProbeResult }
    | { ok: false; kind: 'not-found' | 'too-old' | 'missing-modules' | 'broken'; message: string; probe?: ProbeResult };

/** Parse the probe's stdout (the last JSON line; a sitecustomize may print before it). */
export function parseProbe(stdout: string): ProbeResult | undefined {
    const lines = stdout.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.startsWith('{'));
    for (let i = lines.length - 1; i >= 0; i--) {
        try {
            const o = JSON.parse(lines[i]) as Partial<ProbeResult>;
            if (Array.isArray(o.version) && o.version.length >= 2 && typeof o.executable === 'string') {
                const v = o.version.map(Number);
                return {
                    version: [v[0], v[1], v[2] ?? 0],
                    executable: o.executable,
                    missing: Array.isArray(o.missing) ? o.missing.map(String) : [],
                };
            }
        } catch {
            /* not our line */
        }
    }
    return undefined;
}

export function versionOk(v: readonly number[], min: readonly number[] = MIN_PYTHON): boolean {
    return v[0] > min[0] || (v[0] === min[0] && v[1] >= min[1]);
}

/**
 * Judge a probe run. `spawnError` is the error code of a failed spawn (ENOENT: not found).
 */
export function judgeProbe(command: readonly string[], spawnError: string | undefined, exitCode: number | null,
                           stdout: string, stderr: string): ProbeVerdict {
    const shown = command.join(' ');
    if (spawnError === 'ENOENT' || spawnError === 'EACCES') {
        return { ok: false, kind: 'not-found', message: `No Python interpreter found at \`${shown}\`. ddp-lint needs Python ${MIN_PYTHON.join('.')} or newer.` };
    }
    const probe = parseProbe(stdout);
    if (!probe) {
        const why = (stderr.trim().split(/\r?\n/).pop() ?? '').slice(0, 300) || spawnError || `exit status ${exitCode}`;
        // A Python 2 or a non-Python binary fails to run the probe at all.
        return { ok: false, kind: 'broken', message: `\`${shown}\` could not run as a Python ${MIN_PYTHON.join('.')}+ interpreter (${why}).` };
    }
    if (!versionOk(probe.version)) {
        return {
            ok: false, kind: 'too-old', probe,
            message: `Python ${probe.version.join('.')} at \`${probe.executable}\` is too old: ddp-lint needs Python ${MIN_PYTHON.join('.')} or newer.`,
        };
    }
    if (probe.missing.length > 0) {
        return {
            ok: false, kind: 'missing-modules', probe,
            message: `Python at \`${probe.executable}\` cannot import ${probe.missing.join(', ')}.`,
        };
    }
    return { ok: true, probe };
}
