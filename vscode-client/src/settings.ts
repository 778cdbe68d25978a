/**
 * Settings mapping: VS Code's `ddp-lint.*` configuration -> the object the server receives as
 * `initializationOptions` and as the answer to `workspace/configuration` for section `ddp-lint`.
 *
 * Pure (no `vscode` import) so that it is unit-tested in plain Node.
 */

export const SECTION = 'ddp-lint';

export type Severity = 'error' | 'warning' | 'info' | 'hint';
export type LogLevel = 'error' | 'warning' | 'info' | 'debug';
export type Emulate = 'auto' | 'on' | 'off';

export interface RunSettings {
    nproc: number | null;
    timeoutSeconds: number;
    emulate: Emulate;
    args: string[];
}

export interface ServerSettings {
    enable: boolean;
    select: string[];
    ignore: string[];
    severity: Record<string, Severity>;
    lintOnChange: boolean;
    debounceMs: number;
    interpreter: string[];
    logLevel: LogLevel;
    run: RunSettings;
    codeLens: boolean;
}

export const DEFAULTS: ServerSettings = {
    enable: true,
    select: [],
    ignore: [],
    severity: {},
    lintOnChange: true,
    debounceMs: 150,
    interpreter: [],
    logLevel: 'info',
    run: { nproc: null, timeoutSeconds: 60, emulate: 'auto', args: [] },
    codeLens: true,
};

/** The subset of `vscode.WorkspaceConfiguration` that we use. */
export interface ConfigLike {
    get<T>(key: string): T | undefined;
}

const SEVERITIES: readonly string[] = ['error', 'warning', 'info', 'hint'];
const LOG_LEVELS: readonly string[] = ['error', 'warning', 'info', 'debug'];
const EMULATE: readonly string[] = ['auto', 'on', 'off'];

/** A setting whose value is not what the schema says; the default is used and this is reported. */
export interface SettingProblem {
    key: string;
    message: string;
}

function stringList(value: unknown, key: string, problems: SettingProblem[]): string[] | undefined {
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'string') return value.trim() ? [value.trim()] : [];
    if (Array.isArray(value) && value.every((v) => typeof v === 'string')) {
        return value.map((v: string) => v.trim()).filter((v: string) => v.length > 0);
    }
    problems.push({ key, message: `\`${SECTION}.${key}\` must be a list of strings, got ${JSON.stringify(value)}` });
    return undefined;
}

function codeList(value: unknown, key: string, problems: SettingProblem[]): string[] | undefined {
    const list = stringList(value, key, problems);
    return list?.map((c) => c.toUpperCase());
}

function bool(value: unknown, key: string, problems: SettingProblem[]): boolean | undefined {
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'boolean') return value;
    problems.push({ key, message: `\`${SECTION}.${key}\` must be true or false, got ${JSON.stringify(value)}` });
    return undefined;
}

function num(value: unknown, key: string, problems: SettingProblem[], min: number, max: number,
             integer: boolean): number | undefined {
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'number' && Number.isFinite(value) && value >= min && value <= max
        && (!integer || Number.isInteger(value))) {
        return value;
    }
    problems.push({
        key,
        message: `\`${SECTION}.${key}\` must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}, got ${JSON.stringify(value)}`,
    });
    return undefined;
}

function oneOf<T extends string>(value: unknown, key: string, problems: SettingProblem[],
                                 allowed: readonly string[]): T | undefined {
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'string' && allowed.includes(value.toLowerCase())) return value.toLowerCase() as T;
    problems.push({ key, message: `\`${SECTION}.${key}\` must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}` });
    return undefined;
}

function severityMap(value: unknown, problems: SettingProblem[]): Record<string, Severity> | undefined {
    if (value === undefined || value === null) return undefined;
    if (typeof value !== 'object' || Array.isArray(value)) {
        problems.push({ key: 'severity', message: `\`${SECTION}.severity\` must be an object like {"DDP101": "warning"}, got ${JSON.stringify(value)}` });
        return undefined;
    }
    const out: Record<string, Severity> = {};
    for (const [code, sev] of Object.entries(value as Record<string, unknown>)) {
        if (typeof sev === 'string' && SEVERITIES.includes(sev.toLowerCase())) {
            out[code.trim().toUpperCase()] = sev.toLowerCase() as Severity;
        } else {
            problems.push({ key: 'severity', message: `\`${SECTION}.severity.${code}\` must be one of ${SEVERITIES.join(', ')}, got ${JSON.stringify(sev)}` });
        }
    }
    return out;
}

/**
 * Read and validate every `ddp-lint.*` setting. Invalid values fall back to the default and are
 * listed in `problems` (the extension logs them and shows one warning), so the server always gets
 * a well-formed object.
 */
export function readSettings(config: ConfigLike): { settings: ServerSettings; problems: SettingProblem[] } {
    const p: SettingProblem[] = [];
    const d = DEFAULTS;
    const settings: ServerSettings = {
        enable: bool(config.get('enable'), 'enable', p) ?? d.enable,
        select: codeList(config.get('select'), 'select', p) ?? [...d.select],
        ignore: codeList(config.get('ignore'), 'ignore', p) ?? [...d.ignore],
        severity: severityMap(config.get('severity'), p) ?? { ...d.severity },
        lintOnChange: bool(config.get('lintOnChange'), 'lintOnChange', p) ?? d.lintOnChange,
        debounceMs: num(config.get('debounceMs'), 'debounceMs', p, 0, 5000, true) ?? d.debounceMs,
        interpreter: stringList(config.get('interpreter'), 'interpreter', p) ?? [...d.interpreter],
        logLevel: oneOf<LogLevel>(config.get('logLevel'), 'logLevel', p, LOG_LEVELS) ?? d.logLevel,
        run: {
            nproc: num(config.get('run.nproc'), 'run.nproc', p, 1, 64, true) ?? d.run.nproc,
            timeoutSeconds: num(config.get('run.timeoutSeconds'), 'run.timeoutSeconds', p, 1, 3600, false)
                ?? d.run.timeoutSeconds,
            emulate: oneOf<Emulate>(config.get('run.emulate'), 'run.emulate', p, EMULATE) ?? d.run.emulate,
            args: stringList(config.get('run.args'), 'run.args', p) ?? [...d.run.args],
        },
        codeLens: bool(config.get('codeLens'), 'codeLens', p) ?? d.codeLens,
    };
    return { settings, problems: p };
}

/**
 * The object sent to the server: `initializationOptions` and the `workspace/configuration`
 * answer have the same shape. Empty `select` means "the default selection / pyproject.toml",
 * so it is sent as `null`, which the server reads as "not set".
 */
export function toServerSettings(s: ServerSettings): Record<string, unknown> {
    return {
        enable: s.enable,
        select: s.select.length > 0 ? [...s.select] : null,
        ignore: [...s.ignore],
        severity: { ...s.severity },
        lintOnChange: s.lintOnChange,
        debounceMs: s.debounceMs,
        interpreter: [...s.interpreter],
        logLevel: s.logLevel,
        run: {
            nproc: s.run.nproc,
            timeoutSeconds: s.run.timeoutSeconds,
            emulate: s.run.emulate,
            args: [...s.run.args],
        },
        codeLens: s.codeLens,
    };
}

/** A stable key of the settings: a restart is needed only when it changes. */
export function settingsKey(s: ServerSettings): string {
    return JSON.stringify(toServerSettings(s));
}
