/** The status bar item: the server's state (starting, ready, error, disabled) and run progress. */
import * as vscode from 'vscode';

export type ServerState = 'starting' | 'ready' | 'error' | 'stopped' | 'disabled';

export class StatusItem implements vscode.Disposable {
    private readonly item: vscode.StatusBarItem;
    private state: ServerState = 'stopped';
    private detail = '';
    private running: string | undefined;

    constructor() {
        this.item = vscode.window.createStatusBarItem('ddp-lint.status', vscode.StatusBarAlignment.Right, 100);
        this.item.name = 'ddp-lint';
        this.item.command = 'ddp-lint.showLogs';
        this.render();
        this.item.show();
    }

    get current(): ServerState {
        return this.state;
    }

    setState(state: ServerState, detail = ''): void {
        this.state = state;
        this.detail = detail;
        this.render();
    }

    /** `undefined` ends the run display. */
    setRun(message: string | undefined): void {
        this.running = message;
        this.render();
    }

    private render(): void {
        const i = this.item;
        i.backgroundColor = undefined;
        if (this.running !== undefined) {
            i.text = `$(sync~spin) ddp-lint: ${this.running}`.slice(0, 80);
            i.tooltip = `ddp-lint run: ${this.running}`;
            return;
        }
        switch (this.state) {
            case 'starting':
                i.text = '$(sync~spin) ddp-lint';
                i.tooltip = 'ddp-lint: starting the server…';
                break;
            case 'ready':
                i.text = '$(check) ddp-lint';
                i.tooltip = `ddp-lint: ready${this.detail ? ` (${this.detail})` : ''}. Click to show the logs.`;
                break;
            case 'error':
                i.text = '$(error) ddp-lint';
                i.tooltip = `ddp-lint: ${(this.detail || 'the server is not running').replace(/\.$/, '')}. Click to show the logs.`;
                i.backgroundColor = new vscode.ThemeColor('statusBarItem.errorBackground');
                break;
            case 'disabled':
                i.text = '$(circle-slash) ddp-lint';
                i.tooltip = 'ddp-lint is disabled (setting ddp-lint.enable).';
                break;
            default:
                i.text = '$(circle-outline) ddp-lint';
                i.tooltip = 'ddp-lint: server stopped.';
        }
    }

    dispose(): void {
        this.item.dispose();
    }
}
