import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CrashTracker, RestartCoalescer, TimerApi } from '../../src/restart';

/** Manual clock: timers fire only when the test advances time. */
class FakeTimers implements TimerApi {
    now = 0;
    private seq = 0;
    private timers = new Map<number, { at: number; fn: () => void }>();
    setTimeout(fn: () => void, ms: number): unknown {
        const id = ++this.seq;
        this.timers.set(id, { at: this.now + ms, fn });
        return id;
    }
    clearTimeout(h: unknown): void {
        this.timers.delete(h as number);
    }
    get size(): number {
        return this.timers.size;
    }
    async advance(ms: number): Promise<void> {
        const end = this.now + ms;
        for (;;) {
            const due = [...this.timers.entries()].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
            if (!due) break;
            this.timers.delete(due[0]);
            this.now = due[1].at;
            due[1].fn();
            await flush();
        }
        this.now = end;
        await flush();
    }
}

const flush = async () => {
    for (let i = 0; i < 20; i++) await Promise.resolve();
};

function deferred() {
    let resolve!: () => void;
    const promise = new Promise<void>((r) => (resolve = r));
    return { promise, resolve };
}

test('a burst of requests within the delay costs one restart', async () => {
    const t = new FakeTimers();
    const reasons: string[] = [];
    const c = new RestartCoalescer(async (r) => void reasons.push(r), 250, t);
    const waits = [c.request('a'), c.request('b'), c.request('c')];
    await t.advance(100);
    waits.push(c.request('d')); // re-arms the delay
    await t.advance(200);
    assert.equal(c.count, 0);
    await t.advance(100);
    await Promise.all(waits);
    assert.equal(c.count, 1);
    assert.deepEqual(reasons, ['a, b, c, d']);
});

test('requests during a running restart end in exactly one more restart, never concurrent', async () => {
    const t = new FakeTimers();
    let active = 0;
    let maxActive = 0;
    const gates: Array<ReturnType<typeof deferred>> = [];
    const c = new RestartCoalescer(async () => {
        active++;
        maxActive = Math.max(maxActive, active);
        const g = deferred();
        gates.push(g);
        await g.promise;
        active--;
    }, 250, t);
    const first = c.request('first');
    await t.advance(250);
    assert.equal(c.count, 1);
    let laterDone = false;
    const later = Promise.all([c.request('x'), c.request('y'), c.request('z')]).then(() => (laterDone = true));
    await t.advance(1000); // still running: nothing new starts
    assert.equal(c.count, 1);
    gates[0].resolve();
    await first;
    assert.equal(laterDone, false);
    await t.advance(250);
    assert.equal(c.count, 2);
    gates[1].resolve();
    await later;
    assert.equal(maxActive, 1);
    await t.advance(5000);
    assert.equal(c.count, 2);
    assert.equal(c.pending, false);
});

test('now() skips the delay but still does not overlap a running restart', async () => {
    const t = new FakeTimers();
    const g = deferred();
    let n = 0;
    const c = new RestartCoalescer(async () => {
        n++;
        if (n === 1) await g.promise;
    }, 250, t);
    const p1 = c.now('activation');
    await flush();
    assert.equal(c.count, 1);
    const p2 = c.now('user');
    await flush();
    assert.equal(c.count, 1);
    g.resolve();
    await p1;
    await t.advance(250);
    await p2;
    assert.equal(c.count, 2);
});

test('a failing restart is reported and does not wedge the coalescer', async () => {
    const t = new FakeTimers();
    const errors: unknown[] = [];
    let n = 0;
    const c = new RestartCoalescer(async () => {
        n++;
        if (n === 1) throw new Error('spawn failed');
    }, 10, t, (e) => errors.push(e));
    const p = c.request('x');
    await t.advance(10);
    await p;
    assert.equal(errors.length, 1);
    const q = c.request('y');
    await t.advance(10);
    await q;
    assert.equal(c.count, 2);
});

test('dispose cancels a pending restart and releases waiters', async () => {
    const t = new FakeTimers();
    const c = new RestartCoalescer(async () => undefined, 250, t);
    const p = c.request('x');
    c.dispose();
    await p;
    await t.advance(1000);
    assert.equal(c.count, 0);
    assert.equal(t.size, 0);
});

test('crash loops are bounded: at most N restarts within the window', () => {
    let now = 0;
    const ct = new CrashTracker(3, 60_000, () => now);
    assert.equal(ct.crashed(), true);
    now += 1000;
    assert.equal(ct.crashed(), true);
    now += 1000;
    assert.equal(ct.crashed(), true);
    now += 1000;
    assert.equal(ct.crashed(), false); // 4th crash within a minute: stop
    assert.equal(ct.crashed(), false);
    now += 61_000; // the window slides: an occasional crash is restarted again
    assert.equal(ct.crashed(), true);
    ct.reset();
    assert.equal(ct.recent, 0);
});
