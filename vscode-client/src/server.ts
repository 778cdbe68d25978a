/**
 * The language client's lifecycle: resolve the interpreter, probe it, start the bundled server as
 * `<python> -I -u <extension>/vscode-client/python/launch.py` over stdio from the extension's folder
 * (launch.ts: nothing in the workspace can be imported in its place), and restart it (coalesced,
 * crash loops bounded). Nothing is ever installed: the .vsix ships the server's libraries.
 */
import * as cp from 'child_process';
import * as fs from 'fs';
import * as vscode from 'vscode';
import {
    CloseAction, DidChangeConfigurationNotification, ErrorAction, ExecuteCommandRequest, LanguageClient, LanguageClientOptions,
    RevealOutputChannelOn, ServerOptions, State, TransportKind,
} from 'vscode-languageclient/node';
import {
    judgeProbe, MIN_PYTHON, ProbeVerdict, resolveInterpreter, ResolvedInterpreter,
} from './interpreter';
import { interpreterInsideWorkspace, probeLaunch, serverEnv, serverLaunch } from './launch';
import { pythonExtensionInstalled, pythonExtensionInterpreter } from './python';
import { CrashTracker, RestartCoalescer } from './restart';
import { readSettings, SECTION, ServerSettings, settingsKey, toServerSettings } from './settings';
import { StatusItem } from './status';

/** Commands the extension implements itself (trust checks, progress); never forwarded blindly. */
export const OWN_COMMANDS = new Set(['ddp-lint.run', 'ddp-lint.fixAll', 'ddp-lint.explain', 'ddp-lint.restart', 'ddp-lint.showLogs']);

function errorCode(e: unknown): string | undefined {
    return (e as NodeJS.ErrnoException | undefined)?.code;
}

export class ServerManager implements vscode.Disposable {
    client: LanguageClient | undefined;
    interpreter: ResolvedInterpreter | undefined;
    private readonly crashes = new CrashTracker(4, 3 * 60_000);
    readonly restarts: RestartCoalescer;
    private lastKey = '';
    private shownError = '';
    private stopping = false;
    private disposables: vscode.Disposable[] = [];

    constructor(
        private readonly context: vscode.ExtensionContext,
        readonly log: vscode.LogOutputChannel,
        private readonly status: StatusItem,
    ) {
        this.restarts = new RestartCoalescer((reason) => this.doRestart(reason), 300, undefined,
            (e) => this.log.error(`restart failed: ${String(e)}`));
    }

    settings(): { settings: ServerSettings; problems: { key: string; message: string }[] } {
        return readSettings(vscode.workspace.getConfiguration(SECTION, this.resource()));
    }

    /** The resource whose interpreter and settings apply: the first workspace folder. */
    resource(): vscode.Uri | undefined {
        return vscode.workspace.workspaceFolders?.[0]?.uri
            ?? vscode.window.activeTextEditor?.document.uri;
    }

    /** Restart only when the effective settings or the interpreter changed (coalesced). */
    async settingsChanged(): Promise<void> {
        const key = settingsKey(this.settings().settings);
        if (key !== this.lastKey) {
            await this.restarts.request('settings changed');
        }
    }

    private get extensionRoot(): string {
        return this.context.extensionUri.fsPath;
    }

    private probe(command: string[]): Promise<ProbeVerdict> {
        const l = probeLaunch(command, this.extensionRoot);
        return new Promise((resolve) => {
            cp.execFile(l.command, l.args,
                { cwd: l.cwd, env: serverEnv(process.env), timeout: 30_000, windowsHide: true },
                (err, stdout, stderr) => {
                    const code = err ? errorCode(err) : undefined;
                    const exit = err && typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 0;
                    resolve(judgeProbe(command, code, exit, String(stdout), String(stderr)));
                });
        });
    }

    /** Error state + one notification per distinct problem. Never awaits the user's answer, so
     *  a pending notification cannot hold up restarts or commands waiting for the server. */
    private notifyError(message: string, kind: 'interpreter' | 'logs'): void {
        this.status.setState('error', message);
        this.log.error(message);
        if (this.shownError === message) return; // once per distinct problem, not per restart
        this.shownError = message;
        const action = kind === 'interpreter' ? 'Select Interpreter' : 'Show Logs';
        void Promise.resolve(vscode.window.showErrorMessage(`ddp-lint: ${message}`, action)).then(async (picked) => {
            if (picked === 'Select Interpreter') {
                if (pythonExtensionInstalled()) {
                    await vscode.commands.executeCommand('python.setInterpreter');
                } else {
                    await vscode.commands.executeCommand('workbench.action.openSettings', `${SECTION}.interpreter`);
                }
            } else if (picked === 'Show Logs') {
                this.log.show();
            }
        });
    }

    async start(): Promise<void> {
        const { settings, problems } = this.settings();
        this.lastKey = settingsKey(settings);
        for (const p of problems) this.log.warn(p.message);
        if (problems.length > 0) {
            void vscode.window.showWarningMessage(`ddp-lint: ${problems[0].message} (using the default)`);
        }
        if (!settings.enable) {
            this.status.setState('disabled');
            this.log.info('ddp-lint.enable is false: server not started');
            return;
        }
        this.status.setState('starting');
        const resource = this.resource();
        const interp = await resolveInterpreter({
            pythonExtension: () => pythonExtensionInterpreter(resource),
            // In an untrusted workspace VS Code hides the workspace's value (restrictedConfigurations).
            setting: () => settings.interpreter,
            log: (m) => this.log.warn(m),
            // Restricted Mode: a `.venv/bin/python` shipped inside the workspace is its code
            reject: (command) => {
                if (vscode.workspace.isTrusted) return undefined;
                const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
                const inside = interpreterInsideWorkspace(command, folders, (p) => fs.realpathSync(p));
                return inside === undefined ? undefined
                    : `it is inside the untrusted workspace folder ${inside}; trust the workspace to use it`;
            },
        });
        this.interpreter = interp;
        this.log.info(`interpreter: ${interp.command.join(' ')} (from ${interp.source})`);

        const verdict = await this.probe(interp.command);
        if (!verdict.ok) {
            const hint = verdict.kind === 'missing-modules' ? 'logs' : 'interpreter';
            const message = verdict.kind === 'not-found' || verdict.kind === 'too-old' || verdict.kind === 'broken'
                ? `${verdict.message} Select a Python ${MIN_PYTHON.join('.')}+ interpreter.`
                : verdict.message;
            this.notifyError(message, hint);
            return;
        }
        const exe = verdict.probe.executable || interp.command[0];
        const version = verdict.probe.version.join('.');
        await this.startClient(interp.command, settings, `Python ${version}, ${exe}`);
    }

    private async startClient(command: string[], settings: ServerSettings, detail: string): Promise<void> {
        const l = serverLaunch(command, this.extensionRoot);
        this.log.info(`starting: ${l.command} ${l.args.join(' ')} (in ${l.cwd})`);
        const serverOptions: ServerOptions = {
            command: l.command,
            args: l.args,
            transport: TransportKind.stdio,
            options: { cwd: l.cwd, env: serverEnv(process.env) },
        };
        const initOptions = toServerSettings(settings);
        const clientOptions: LanguageClientOptions = {
            documentSelector: [
                { scheme: 'file', language: 'python' },
                { scheme: 'untitled', language: 'python' },
                // notebook cells (the server syncs notebooks as a whole: LSP 3.17 notebook sync)
                { notebook: '*', language: 'python' },
            ],
            outputChannel: this.log,
            revealOutputChannelOn: RevealOutputChannelOn.Never,
            initializationOptions: initOptions,
            diagnosticCollectionName: 'ddp-lint',
            errorHandler: {
                error: () => ({ action: ErrorAction.Continue }),
                closed: () => {
                    if (this.stopping) return { action: CloseAction.DoNotRestart, handled: true };
                    if (this.crashes.crashed()) {
                        this.log.warn(`server exited unexpectedly; restarting (${this.crashes.recent} in the last 3 minutes)`);
                        this.status.setState('starting');
                        return { action: CloseAction.Restart, handled: true };
                    }
                    this.notifyError(`the server crashed ${this.crashes.recent} times in 3 minutes and was stopped. Fix the cause, then run "ddp-lint: Restart Server".`, 'logs');
                    return { action: CloseAction.DoNotRestart, handled: true };
                },
            },
            initializationFailedHandler: (e) => {
                this.log.error(`initialize failed: ${e instanceof Error ? e.message : String(e)}`);
                return false;
            },
            middleware: {
                workspace: {
                    // The server registers for `workspace/didChangeConfiguration` on section
                    // ddp-lint: send the validated settings, not VS Code's raw values.
                    didChangeConfiguration: async () => {
                        const current = this.client;
                        if (!current || current.state !== State.Running) return;
                        await current.sendNotification(DidChangeConfigurationNotification.type, {
                            settings: { [SECTION]: toServerSettings(this.settings().settings) },
                        });
                    },
                    // Answer `workspace/configuration` for our section with the validated settings.
                    configuration: async (params, token, next) => {
                        const result = await next(params, token);
                        if (!Array.isArray(result)) return result;
                        return params.items.map((item, i) => {
                            if (item.section !== SECTION) return result[i];
                            const scope = item.scopeUri ? vscode.Uri.parse(item.scopeUri) : this.resource();
                            return toServerSettings(readSettings(vscode.workspace.getConfiguration(SECTION, scope)).settings);
                        });
                    },
                },
            },
        };
        const client = new LanguageClient('ddp-lint', 'ddp-lint', serverOptions, clientOptions);
        // The server advertises `ddp-lint.run` (the code action's command). The extension owns
        // that command (trust check, progress, cancellation), so the client must not register it.
        const exec = client.getFeature(ExecuteCommandRequest.method) as unknown as {
            register(data: { id: string; registerOptions: { commands?: string[] } }): void;
        };
        const register = exec.register.bind(exec);
        exec.register = (data) => register({
            ...data,
            registerOptions: { ...data.registerOptions, commands: (data.registerOptions.commands ?? []).filter((c) => !OWN_COMMANDS.has(c)) },
        });
        this.disposables.push(client.onDidChangeState((e) => {
            if (e.newState === State.Running) {
                this.status.setState('ready', detail);
                this.shownError = '';
            } else if (e.newState === State.Starting) {
                this.status.setState('starting');
            } else if (e.newState === State.Stopped && !this.stopping && this.status.current !== 'error') {
                this.status.setState('stopped');
            }
        }));
        // Server-initiated run progress ("ddp-lint-run-*" tokens) is shown by the client as a
        // notification; mirror it in the status bar as well. jsonrpc keeps one handler per token,
        // so wrap the registration instead of adding a second handler.
        const onProgress = client.onProgress.bind(client);
        (client as { onProgress: typeof client.onProgress }).onProgress = ((type, token, handler) =>
            onProgress(type, token, (value: unknown) => {
                if (typeof token === 'string' && token.startsWith('ddp-lint-run')) this.runProgress(value);
                return (handler as (v: unknown) => void)(value);
            })) as typeof client.onProgress;
        this.client = client;
        try {
            await client.start();
            this.log.info(`server started (${detail})`);
        } catch (e) {
            const msg = e instanceof Error ? e.message : String(e);
            this.notifyError(`the server failed to start: ${msg}`, 'logs');
        }
    }

    private runProgress(value: unknown): void {
        const v = value as { kind?: string; title?: string; message?: string; percentage?: number };
        if (v.kind === 'end') {
            this.status.setRun(undefined);
            return;
        }
        const pct = typeof v.percentage === 'number' ? ` ${v.percentage}%` : '';
        const text = v.message ?? v.title;
        if (text) this.status.setRun(`${text}${pct}`);
    }

    async stop(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        for (const d of this.disposables.splice(0)) d.dispose();
        if (!client) return;
        this.stopping = true;
        try {
            if (client.state !== State.Stopped) await client.stop(5_000);
        } catch (e) {
            this.log.warn(`stopping the server: ${String(e)}`);
        } finally {
            this.stopping = false;
            try {
                await client.dispose(1_000);
            } catch {
                /* already gone */
            }
        }
    }

    private async doRestart(reason: string): Promise<void> {
        this.log.info(`restarting the server: ${reason}`);
        await this.stop();
        await this.start();
    }

    /** The user's restart command: also forgets earlier crashes and shown errors. */
    async userRestart(): Promise<void> {
        this.crashes.reset();
        this.shownError = '';
        await this.restarts.now('restart command');
    }

    /** Wait until the client is running (or give up). */
    async ready(): Promise<LanguageClient | undefined> {
        while (this.restarts.pending) await new Promise((r) => setTimeout(r, 50));
        const c = this.client;
        if (!c) return undefined;
        for (let i = 0; i < 600 && c.state === State.Starting; i++) await new Promise((r) => setTimeout(r, 50));
        return c.state === State.Running ? c : undefined;
    }

    dispose(): void {
        this.restarts.dispose();
        void this.stop();
    }
}
