/** ddp-lint for VS Code: activation, commands, and the events that restart the server. */
import * as vscode from 'vscode';
import { watchPythonInterpreter } from './python';
import { runCommand } from './run';
import { ServerManager } from './server';
import { SECTION } from './settings';
import { StatusItem } from './status';

let manager: ServerManager | undefined;

export const FIX_ALL_KIND = vscode.CodeActionKind.SourceFixAll.append('ddp-lint');

async function fixAll(m: ServerManager): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== 'python') {
        void vscode.window.showWarningMessage('ddp-lint: open a Python file to fix it.');
        return;
    }
    if (!(await m.ready())) {
        void vscode.window.showErrorMessage('ddp-lint: the server is not running.');
        return;
    }
    const doc = editor.document;
    const whole = new vscode.Range(0, 0, doc.lineCount, 0);
    const actions = await vscode.commands.executeCommand<vscode.CodeAction[]>(
        'vscode.executeCodeActionProvider', doc.uri, whole, FIX_ALL_KIND.value) ?? [];
    const action = actions.find((a) => a.kind && FIX_ALL_KIND.contains(a.kind));
    if (!action || (!action.edit && !action.command)) {
        void vscode.window.showInformationMessage('ddp-lint: no auto-fixable problems in this file.');
        return;
    }
    if (action.edit) await vscode.workspace.applyEdit(action.edit);
    if (action.command) await vscode.commands.executeCommand(action.command.command, ...(action.command.arguments ?? []));
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    const log = vscode.window.createOutputChannel('ddp-lint', { log: true });
    const status = new StatusItem();
    const m = new ServerManager(context, log, status);
    manager = m;
    context.subscriptions.push(log, status, m);

    context.subscriptions.push(
        vscode.commands.registerCommand('ddp-lint.restart', () => m.userRestart()),
        vscode.commands.registerCommand('ddp-lint.showLogs', () => log.show()),
        vscode.commands.registerCommand('ddp-lint.fixAll', () => fixAll(m)),
        vscode.commands.registerCommand('ddp-lint.run', (arg?: unknown) => runCommand(m, status, arg)),
        vscode.workspace.onDidChangeConfiguration((e) => {
            if (e.affectsConfiguration(SECTION)) void m.settingsChanged();
        }),
        vscode.workspace.onDidGrantWorkspaceTrust(() => void m.restarts.request('workspace trusted')),
        vscode.workspace.onDidChangeWorkspaceFolders(() => void m.restarts.request('workspace folders changed')),
    );
    const watcher = await watchPythonInterpreter(() => void m.restarts.request('Python interpreter changed'));
    if (watcher) context.subscriptions.push(watcher);

    log.info(`ddp-lint ${context.extension.packageJSON.version as string} activating (workspace ${vscode.workspace.isTrusted ? 'trusted' : 'untrusted: linting only'})`);
    await m.restarts.now('activation');
}

export async function deactivate(): Promise<void> {
    const m = manager;
    manager = undefined;
    if (m) {
        m.restarts.dispose();
        await m.stop();
    }
}
