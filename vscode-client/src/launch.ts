/**
 * How the extension starts Python: the probe and the language server (issue 12, item 3).
 *
 * Never `<python> -m ddp_lint.lsp_server` from the workspace folder: `-m` and `-c` put the working
 * folder first on `sys.path`, so a workspace `ddp_lint/`, `lsp_server/` or `pygls/` package (or a
 * `sitecustomize.py`) would run as soon as a Python file is opened, in Restricted Mode too.
 * Instead: `<python> -I <extension>/vscode-client/python/launch.py [--probe]`, by absolute path,
 * from the extension's own folder. `-I` (isolated mode: no current or script folder on `sys.path`,
 * no user site-packages, no PYTHON* variables) holds on every supported Python (3.10+; it exists
 * since 3.4); the launcher then puts the extension's sources and bundled libraries on `sys.path`
 * itself. No `pip` is ever run: the libraries ship in the .vsix (bundled/libs).
 *
 * Pure (no `vscode` import), so that it is unit-tested in plain Node.
 */
import * as path from 'path';

/** The launcher, relative to the extension folder (packaged: see .vscodeignore). */
export const LAUNCHER: readonly string[] = ['vscode-client', 'python', 'launch.py'];

/** Isolated mode; `-u` stands in for PYTHONUNBUFFERED, which `-I` ignores. */
export const ISOLATION_FLAGS: readonly string[] = ['-I', '-u'];

export interface PythonLaunch {
    command: string;
    args: string[];
    /** Always the extension folder: never a workspace folder. */
    cwd: string;
}

export function launcherPath(extensionRoot: string): string {
    return path.join(extensionRoot, ...LAUNCHER);
}

function launch(interpreter: readonly string[], extensionRoot: string, extra: readonly string[]): PythonLaunch {
    if (interpreter.length === 0 || !interpreter[0]) throw new Error('no interpreter');
    if (!path.isAbsolute(extensionRoot)) throw new Error(`the extension folder must be absolute: ${extensionRoot}`);
    return {
        command: interpreter[0],
        args: [...interpreter.slice(1), ...ISOLATION_FLAGS, launcherPath(extensionRoot), ...extra],
        cwd: extensionRoot,
    };
}

/** `<python> -I -u <launcher> --probe`: prints one JSON line (version, missing modules). */
export function probeLaunch(interpreter: readonly string[], extensionRoot: string): PythonLaunch {
    return launch(interpreter, extensionRoot, ['--probe']);
}

/** `<python> -I -u <launcher>`: the language server over stdio. */
export function serverLaunch(interpreter: readonly string[], extensionRoot: string): PythonLaunch {
    return launch(interpreter, extensionRoot, []);
}

/** The server's environment: the user's, plus output settings for the processes it starts
 *  (`-I` makes the server itself ignore PYTHON* variables). No PYTHONPATH is added: the launcher
 *  sets `sys.path`, so the ranks of `ddp-lint.run` see the user's PYTHONPATH and nothing of ours. */
export function serverEnv(base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...base, PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8' };
    delete env.DDP_LINT_BUNDLE_PATHS;
    return env;
}

function inside(child: string, parent: string): boolean {
    const rel = path.relative(parent, child);
    return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * In an untrusted workspace, an interpreter that lives inside a workspace folder (say a
 * `.venv/bin/python` that came with the repository) is the workspace's code: refuse it.
 * Returns the folder that contains it, or undefined when it is acceptable.
 */
export function interpreterInsideWorkspace(interpreter: readonly string[], folders: readonly string[],
                                           realpath: (p: string) => string = (p) => p): string | undefined {
    const exe = interpreter[0];
    if (!exe || !path.isAbsolute(exe)) return undefined; // a bare name is looked up on PATH
    const candidates = new Set([path.normalize(exe)]);
    try { candidates.add(realpath(exe)); } catch { /* missing: the probe reports it */ }
    for (const f of folders) {
        const roots = new Set([path.normalize(f)]);
        try { roots.add(realpath(f)); } catch { /* ignore */ }
        for (const c of candidates) for (const r of roots) if (inside(c, r)) return f;
    }
    return undefined;
}
