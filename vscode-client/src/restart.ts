/**
 * Coalesced restarts. Any number of restart requests that arrive while a restart is pending or
 * running end in at most ONE further restart, which starts after the running one finished and
 * sees the latest settings. Pure (timers injected), unit-tested in plain Node.
 */

export interface TimerApi {
    setTimeout(fn: () => void, ms: number): unknown;
    clearTimeout(handle: unknown): void;
}

const realTimers: TimerApi = {
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

export class RestartCoalescer {
    private timer: unknown;
    private running: Promise<void> | undefined;
    private again = false;
    private waiters: Array<() => void> = [];
    private disposed = false;
    /** How many restarts actually ran (for tests and the log). */
    public count = 0;

    constructor(
        private readonly restart: (reason: string) => Promise<void>,
        private readonly delayMs = 250,
        private readonly timers: TimerApi = realTimers,
        private readonly onError: (e: unknown) => void = () => undefined,
    ) {}

    private reasons: string[] = [];

    /** Ask for a restart; resolves when a restart that started after this call has finished. */
    request(reason: string): Promise<void> {
        if (this.disposed) return Promise.resolve();
        this.reasons.push(reason);
        const done = new Promise<void>((resolve) => this.waiters.push(resolve));
        if (this.running) {
            this.again = true; // run once more after the current one, with the latest state
        } else {
            if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
            this.timer = this.timers.setTimeout(() => this.fire(), this.delayMs);
        }
        return done;
    }

    /** Restart now (the user's command): still never two at once. */
    now(reason: string): Promise<void> {
        if (this.timer !== undefined) {
            this.timers.clearTimeout(this.timer);
            this.timer = undefined;
        }
        const p = this.request(reason);
        if (!this.running) {
            if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
            this.timer = undefined;
            this.fire();
        }
        return p;
    }

    get pending(): boolean {
        return this.timer !== undefined || this.running !== undefined;
    }

    private fire(): void {
        this.timer = undefined;
        if (this.disposed) return;
        const waiters = this.waiters;
        const reasons = this.reasons;
        this.waiters = [];
        this.reasons = [];
        this.again = false;
        this.count++;
        this.running = (async () => {
            try {
                await this.restart(reasons.join(', '));
            } catch (e) {
                this.onError(e);
            }
        })();
        void this.running.then(() => {
            this.running = undefined;
            for (const w of waiters) w();
            if (this.again && !this.disposed) {
                this.again = false;
                this.timer = this.timers.setTimeout(() => this.fire(), this.delayMs);
            }
        });
    }

    dispose(): void {
        this.disposed = true;
        if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
        this.timer = undefined;
        for (const w of this.waiters) w();
        this.waiters = [];
    }
}

/**
 * Bounded crash restarts: at most `maxCrashes` within `windowMs`. Beyond that the server stays
 * down and the user is told, never an endless crash loop.
 */
export class CrashTracker {
    private times: number[] = [];

    constructor(private readonly maxCrashes = 4, private readonly windowMs = 3 * 60_000,
                private readonly now: () => number = Date.now) {}

    /** Record a crash; true when another automatic restart is allowed. */
    crashed(): boolean {
        const t = this.now();
        this.times = this.times.filter((x) => t - x < this.windowMs);
        this.times.push(t);
        return this.times.length <= this.maxCrashes;
    }

    get recent(): number {
        const t = this.now();
        return this.times.filter((x) => t - x < this.windowMs).length;
    }

    reset(): void {
        this.times = [];
    }
}
