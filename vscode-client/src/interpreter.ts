/**
 * Which Python runs the server. Order (issue 7): the interpreter the Python extension has
 * selected (through its API), else the `ddp-lint.interpreter` setting, else `python3`.
 *
 * Pure: the sources are injected, so that the order is unit-tested in plain Node.
 */

export const MIN_PYTHON: readonly [number, number] = [3, 10];

export type InterpreterSource = 'python-extension' | 'setting' | 'default';

export interface ResolvedInterpreter {
    /** argv prefix: `[...command, '-I', '-u', <launcher>]` starts the server (see launch.ts). */
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
    /** A reason to refuse the Python extension's choice (in an untrusted workspace: an
     *  interpreter inside the workspace, see launch.ts), or undefined to accept it. */
    reject?(command: string[]): string | undefined;
}

export const DEFAULT_INTERPRETER: readonly string[] = ['python3'];

export async function resolveInterpreter(sources: InterpreterSources): Promise<ResolvedInterpreter> {
    try {
        const fromExt = await sources.pythonExtension();
        if (fromExt && fromExt.length > 0 && fromExt[0]) {
            const why = sources.reject?.(fromExt);
            if (why === undefined) return { command: [...fromExt], source: 'python-extension' };
            sources.log?.(`not using the Python extension's interpreter ${fromExt.join(' ')}: ${why}`);
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

export interface ProbeResult {
    version: [number, number, number];
    executable: string;
    missing: string[];
    /** false when the extension's bundled/libs folder is absent (a damaged install or a dev checkout). */
    bundled: boolean;
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
                    bundled: o.bundled !== false,
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
        // Nothing is ever pip-installed (issue 12, item 6): the .vsix ships every library.
        const ours = probe.missing.filter((m) => m.startsWith('ddp_lint'));
        const message = ours.length > 0
            ? `the extension is damaged: its Python sources (${ours.join(', ')}) are missing. Reinstall ddp-lint.`
            : !probe.bundled
                ? `the extension's bundled Python libraries (bundled/libs) are missing, so Python at \`${probe.executable}\` cannot import ${probe.missing.join(', ')}. Reinstall ddp-lint (in a development checkout: \`npm run bundle-python\`).`
                : `Python at \`${probe.executable}\` cannot import ${probe.missing.join(', ')}, even from the extension's bundled libraries. Reinstall ddp-lint.`;
        return { ok: false, kind: 'missing-modules', probe, message };
    }
    return { ok: true, probe };
}
