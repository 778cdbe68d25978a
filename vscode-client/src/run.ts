/**
 * `ddp-lint.run` and `ddp-lint.fixAll`: thin wrappers over the server's `workspace/executeCommand`
 * commands of the same names. The server reports run progress (a cancellable notification, mirrored
 * in the status bar), publishes the runtime diagnostics and shows the summary. `ddp-lint.run` is
 * disabled, with an explanation, in an untrusted workspace: it would execute the workspace's code.
 */
import * as vscode from 'vscode';
import { ExecuteCommandRequest } from 'vscode-languageclient/node';
import type { ServerManager } from './server';
import type { StatusItem } from './status';

/** The URI the command was invoked for: a Uri (explorer/editor title), a string (the server's code
 *  action passes the document URI) or `{uri}`, else the active editor. */
export function targetUri(arg: unknown): vscode.Uri | undefined {
    if (arg instanceof vscode.Uri) return arg;
    if (typeof arg === 'string' && arg) return vscode.Uri.parse(arg);
    if (arg && typeof arg === 'object' && typeof (arg as { uri?: unknown }).uri === 'string') {
        return vscode.Uri.parse((arg as { uri: string }).uri);
    }
    return vscode.window.activeTextEditor?.document.uri;
}

export const UNTRUSTED_RUN_MESSAGE = 'ddp-lint: "Run with torchrun" is disabled in this untrusted workspace, because it would execute the workspace\'s code. Linting still works. Trust the workspace to enable it.';

let running = false;

async function failed(manager: ServerManager, what: string, e: unknown): Promise<void> {
    const msg = e instanceof Error ? e.message : String(e);
    manager.log.error(`${what} failed: ${msg}`);
    const pick = await vscode.window.showErrorMessage(`ddp-lint: ${what} failed: ${msg}`, 'Show Logs');
    if (pick) manager.log.show();
}

export async function runCommand(manager: ServerManager, status: StatusItem, arg: unknown): Promise<unknown> {
    if (!vscode.workspace.isTrusted) {
        const pick = await vscode.window.showWarningMessage(UNTRUSTED_RUN_MESSAGE, 'Manage Workspace Trust');
        if (pick) await vscode.commands.executeCommand('workbench.trust.manage');
        return undefined;
    }
    const uri = targetUri(arg);
    if (!uri) {
        void vscode.window.showWarningMessage('ddp-lint: open a Python file to run it with torchrun.');
        return undefined;
    }
    if (uri.scheme !== 'file') {
        void vscode.window.showWarningMessage('ddp-lint: only a file saved on disk can be run (save it first).');
        return undefined;
    }
    if (running) {
        void vscode.window.showInformationMessage('ddp-lint: a run is already in progress (cancel it from its notification).');
        return undefined;
    }
    // torchrun runs the file on disk: save pending edits first
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
    if (doc?.isDirty && !(await doc.save())) {
        void vscode.window.showWarningMessage('ddp-lint: could not save the file; not running it.');
        return undefined;
    }
    const client = await manager.ready();
    if (!client) {
        const pick = await vscode.window.showErrorMessage('ddp-lint: the server is not running, so the file cannot be run.', 'Show Logs');
        if (pick) manager.log.show();
        return undefined;
    }
    const name = uri.path.split('/').pop() ?? uri.fsPath;
    running = true;
    status.setRun(`running ${name}`);
    try {
        const result = await client.sendRequest(ExecuteCommandRequest.type, {
            command: 'ddp-lint.run',
            arguments: [{ uri: uri.toString() }],
        });
        manager.log.info(`run result: ${JSON.stringify(result)}`);
        const r = result as { findings?: unknown } | null;
        if (r && typeof r.findings === 'number' && r.findings > 0) {
            await vscode.commands.executeCommand('workbench.actions.view.problems');
        }
        return result;
    } catch (e) {
        await failed(manager, 'the run', e);
        return undefined;
    } finally {
        running = false;
        status.setRun(undefined);
    }
}

export async function fixAllCommand(manager: ServerManager, arg: unknown): Promise<unknown> {
    const uri = targetUri(arg);
    const doc = uri && vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
    if (!uri || !doc || doc.languageId !== 'python') {
        void vscode.window.showWarningMessage('ddp-lint: open a Python file to fix it.');
        return undefined;
    }
    const client = await manager.ready();
    if (!client) {
        void vscode.window.showErrorMessage('ddp-lint: the server is not running.');
        return undefined;
    }
    try {
        // the server answers with {applied} after applying the safe fixes with workspace/applyEdit
        const result = await client.sendRequest(ExecuteCommandRequest.type, {
            command: 'ddp-lint.fixAll',
            arguments: [{ uri: uri.toString() }],
        }) as { applied?: boolean; reason?: string } | null;
        if (result && result.applied === false) {
            void vscode.window.showInformationMessage(`ddp-lint: ${result.reason ?? 'no auto-fixable problems in this file'}.`);
        }
        return result;
    } catch (e) {
        await failed(manager, 'fix all', e);
        return undefined;
    }
}

/** `ddp-lint.explain` ("Explain a failed job…"): asks for the folder of a failed job's artefacts
 *  (Flight Recorder dumps, torchelastic error files, torchrun logs) unless one is given, and hands it
 *  to the server's command of the same name. The server publishes the findings on the workspace's
 *  files; they stay until the same folder is explained again or their lines are edited. It reads
 *  files and runs nothing, but the server refuses it in an untrusted workspace all the same. */
export async function explainCommand(manager: ServerManager, arg: unknown): Promise<unknown> {
    let folder = arg instanceof vscode.Uri ? arg : undefined;
    if (!folder) {
        const picked = await vscode.window.showOpenDialog({
            canSelectFolders: true, canSelectFiles: true, canSelectMany: false,
            openLabel: 'Explain', title: 'ddp-lint: the folder of a failed job\'s artefacts (Flight Recorder dumps, error files, logs)',
        });
        folder = picked?.[0];
    }
    if (!folder) return undefined;
    if (folder.scheme !== 'file') {
        void vscode.window.showWarningMessage('ddp-lint: the artefacts must be on this machine (a local folder).');
        return undefined;
    }
    const client = await manager.ready();
    if (!client) {
        void vscode.window.showErrorMessage('ddp-lint: the server is not running.');
        return undefined;
    }
    try {
        const result = await client.sendRequest(ExecuteCommandRequest.type, {
            command: 'ddp-lint.explain',
            arguments: [{ uri: folder.toString() }],
        });
        manager.log.info(`explain result: ${JSON.stringify(result)}`);
        const r = result as { findings?: unknown } | null;
        if (r && typeof r.findings === 'number' && r.findings > 0) {
            await vscode.commands.executeCommand('workbench.actions.view.problems');
        }
        return result;
    } catch (e) {
        await failed(manager, 'explain', e);
        return undefined;
    }
}
