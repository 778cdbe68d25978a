/** The Python extension's selected interpreter, through its API (`@vscode/python-extension`). */
import * as vscode from 'vscode';
import { PVSC_EXTENSION_ID, PythonExtension } from '@vscode/python-extension';

export function pythonExtensionInstalled(): boolean {
    return vscode.extensions.getExtension(PVSC_EXTENSION_ID) !== undefined;
}

/** The selected interpreter for `resource`, or `undefined` when the extension is missing. */
export async function pythonExtensionInterpreter(resource: vscode.Uri | undefined): Promise<string[] | undefined> {
    if (!pythonExtensionInstalled()) return undefined;
    const api = await PythonExtension.api();
    const envPath = api.environments.getActiveEnvironmentPath(resource);
    const env = await api.environments.resolveEnvironment(envPath);
    const exe = env?.executable.uri?.fsPath;
    return exe ? [exe] : undefined;
}

/** Calls `onChange` when the user selects another interpreter (no-op without the extension). */
export async function watchPythonInterpreter(onChange: () => void): Promise<vscode.Disposable | undefined> {
    if (!pythonExtensionInstalled()) return undefined;
    try {
        const api = await PythonExtension.api();
        return api.environments.onDidChangeActiveEnvironmentPath(() => onChange());
    } catch {
        return undefined;
    }
}
