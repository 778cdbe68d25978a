/**
 * `ddp-lint.run`: run a file under torchrun through the server's `workspace/executeCommand`
 * "ddp-lint.run", with progress (notification + status bar) and cancellation. Disabled, with an
 * explanation, in an untrusted workspace: it would execute the workspace's code.
 */
import * as vscode from 'vscode';
import { ExecuteCommandRequest, WorkDoneProgress, WorkDoneProgressReport } from 'vscode-languageclient/node';
import type { ServerManager } from './server';
import type { StatusItem } from './status';

/** The URI the command was invoked for: a Uri (explorer/editor title), a string or `{uri}` (the
 *  server's code action), else the active editor. */
export function targetUri(arg: unknown): vscode.Uri | undefined {
    if (arg instanceof vscode.Uri) return arg;
    if (typeof arg === 'string' && arg) return vscode.Uri.parse(arg);
    if (arg && typeof arg === 'object' && typeof (arg as { uri?: unknown }).uri === 'string') {
        return vscode.Uri.parse((arg as { uri: string }).uri);
    }
    return vscode.window.activeTextEditor?.document.uri;
}

let running = false;

export async function runCommand(manager: ServerManager, status: StatusItem, arg: unknown): Promise<unknown> {
    if (!vscode.workspace.isTrusted) {
        const pick = await vscode.window.showWarningMessage(
            'ddp-lint: "Run with torchrun" is disabled in an untrusted workspace, because it executes this workspace\'s code. Linting still works. Trust the workspace to run it.',
            'Manage Workspace Trust');
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
        void vscode.window.showInformationMessage('ddp-lint: a run is already in progress.');
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
    const token = `ddp-lint-run-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    try {
        return await vscode.window.withProgress({
            location: vscode.ProgressLocation.Notification,
            title: `ddp-lint: running ${name} with torchrun`,
            cancellable: true,
        }, async (progress, cancel) => {
            let last = 0;
            const sub = client.onProgress(WorkDoneProgress.type, token, (v) => {
                const msg = (v as WorkDoneProgressReport).message;
                const pct = (v as WorkDoneProgressReport).percentage;
                if (msg) status.setRun(`${name}: ${msg}`);
                const inc = typeof pct === 'number' && pct > last ? pct - last : undefined;
                if (typeof pct === 'number') last = Math.max(last, pct);
                progress.report({ message: msg, increment: inc });
            });
            try {
                const result = await client.sendRequest(ExecuteCommandRequest.type, {
                    command: 'ddp-lint.run',
                    arguments: [{ uri: uri.toString() }],
                    workDoneToken: token,
                }, cancel);
                manager.log.info(`run result: ${JSON.stringify(result)}`);
                void showSummary(result, name);
                return result;
            } catch (e) {
                if (cancel.isCancellationRequested) {
                    void vscode.window.showInformationMessage(`ddp-lint: run of ${name} cancelled.`);
                    return undefined;
                }
                const msg = e instanceof Error ? e.message : String(e);
                manager.log.error(`run failed: ${msg}`);
                const pick = await vscode.window.showErrorMessage(`ddp-lint: the run failed: ${msg}`, 'Show Logs');
                if (pick) manager.log.show();
                return undefined;
            } finally {
                sub.dispose();
            }
        });
    } finally {
        running = false;
        status.setRun(undefined);
    }
}

async function showSummary(result: unknown, name: string): Promise<void> {
    let text: string | undefined;
    let count: number | undefined;
    if (result && typeof result === 'object') {
        const r = result as Record<string, unknown>;
        if (typeof r.summary === 'string') text = r.summary;
        else if (typeof r.message === 'string') text = r.message;
        if (Array.isArray(r.findings)) count = r.findings.length;
        else if (typeof r.count === 'number') count = r.count;
    } else if (typeof result === 'string') {
        text = result;
    }
    if (text === undefined) {
        text = count === undefined ? `run of ${name} finished.`
            : count === 0 ? `run of ${name} finished cleanly on every rank.`
            : `run of ${name}: ${count} runtime finding${count === 1 ? '' : 's'} (see the Problems panel).`;
    }
    if (count !== undefined && count > 0) {
        const pick = await vscode.window.showWarningMessage(`ddp-lint: ${text}`, 'Show Problems');
        if (pick) await vscode.commands.executeCommand('workbench.actions.view.problems');
    } else {
        void vscode.window.showInformationMessage(`ddp-lint: ${text}`);
    }
}
