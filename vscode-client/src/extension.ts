/** ddp-lint for VS Code: activation, commands, and the events that restart the server. */
import * as vscode from 'vscode';
import { watchPythonInterpreter } from './python';
import { explainCommand, fixAllCommand, runCommand } from './run';
import { ServerManager } from './server';
import { SECTION } from './settings';
import { StatusItem } from './status';

let manager: ServerManager | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    const log = vscode.window.createOutputChannel('ddp-lint', { log: true });
    const status = new StatusItem();
    const m = new ServerManager(context, log, status);
    manager = m;
    context.subscriptions.push(log, status, m);

    context.subscriptions.push(
        vscode.commands.registerCommand('ddp-lint.restart', () => m.userRestart()),
        vscode.commands.registerCommand('ddp-lint.showLogs', () => log.show()),
        vscode.commands.registerCommand('ddp-lint.fixAll', (arg?: unknown) => fixAllCommand(m, arg)),
        vscode.commands.registerCommand('ddp-lint.run', (arg?: unknown) => runCommand(m, status, arg)),
        vscode.commands.registerCommand('ddp-lint.explain', (arg?: unknown) => explainCommand(m, arg)),
        vscode.workspace.onDidChangeConfiguration((e) => {
            if (e.affectsConfiguration(SECTION)) void m.settingsChanged();
        }),
        vscode.workspace.onDidGrantWorkspaceTrust(() => void m.restarts.request('workspace trusted')),
        vscode.workspace.onDidChangeWorkspaceFolders(() => void m.restarts.request('workspace folders changed')),
    );
    const watcher = await watchPythonInterpreter(() => void m.restarts.request('Python interpreter changed'));
    if (watcher) context.subscriptions.push(watcher);

    log.info(`ddp-lint ${context.extension.packageJSON.version as string} activating (workspace ${vscode.workspace.isTrusted ? 'trusted' : 'untrusted: linting only'})`);
    // not awaited: activation stays quick; commands wait for the server through manager.ready()
    void m.restarts.now('activation');
}

export async function deactivate(): Promise<void> {
    const m = manager;
    manager = undefined;
    if (m) {
        m.restarts.dispose();
        await m.stop();
    }
}
