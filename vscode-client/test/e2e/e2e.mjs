// End to end in a real VS Code (code-server, pinned) driven by playwright-core in Debian's
// chromium. Started by tests/test_vscode_e2e.py, which installs the packaged .vsix, starts
// code-server on the workspace and passes:
//   URL, WS (workspace folder), OUT (screenshots), TOOLS_DIR (where playwright-core lives),
//   SEED (the seed file name), RUN_FILE (the file run with ddp-lint.run), RUN_CODE (expected code),
//   RUN_TEXT / RUN_LINE (optional: text and line the runtime finding must have), MODE (trusted|untrusted),
//   CHROMIUM (browser path).
// Exit 0 on success, 1 with "FAIL: ..." on the first failed expectation.
import { createRequire } from 'module';
import fs from 'fs';
import path from 'path';

const require = createRequire((process.env.TOOLS_DIR || process.cwd()) + '/');
const { chromium } = require('playwright-core');

const env = (k) => {
    const v = process.env[k];
    if (!v) { console.error(`FAIL: ${k} is not set`); process.exit(1); }
    return v;
};
const URL = env('URL'), WS = env('WS'), OUT = env('OUT'), SEED = env('SEED');
const RUN_FILE = env('RUN_FILE'), RUN_CODE = env('RUN_CODE');
const MODE = process.env.MODE || 'trusted';  // 'untrusted': restricted mode, the run is refused
const t0 = Date.now();
const log = (m) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
class Fail extends Error {}
const fail = (m) => { throw new Fail(m); };

const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
        '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
const shot = async (name) => {
    const p = path.join(OUT, name);
    await page.screenshot({ path: p });
    log(`screenshot ${p}`);
};

const problems = () => page.locator('.markers-panel .monaco-list-row');
const problemRow = (text) => page.locator('.markers-panel .monaco-list-row', { hasText: text });
// a row of a static finding with this code (not a row whose message merely mentions the code)
const staticRow = (code) => page.locator('.markers-panel .monaco-list-row', { hasText: new RegExp(`ddp-lint\\W*${code}\\W*\\[Ln`) });
const rowTexts = async () => (await problems().allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim());

async function openFile(name) {
    await page.locator('.explorer-folders-view .monaco-list-row', { hasText: name }).first().click({ timeout: 60000 });
    await page.locator('.tabs-container .tab.active', { hasText: name }).waitFor({ timeout: 30000 });
    await page.waitForSelector('.monaco-editor .view-lines', { timeout: 30000 });
}

async function focusEditor() {
    // keyboard, not a click: a click lands wherever the editor happens to be scrolled. A loaded
    // workbench can drop the first Ctrl+1 (focus still moving from a panel or a just-opened tab):
    // try again a few times before giving up.
    const focused = page.locator('.editor-group-container.active .monaco-editor.focused').first();
    for (let attempt = 0; ; attempt++) {
        await page.keyboard.press('Escape');
        await page.keyboard.press('Control+1');
        try {
            await focused.waitFor({ timeout: 5000 });
            return;
        } catch (e) {
            if (attempt >= 3) throw e;
            log(`editor not focused after Ctrl+1 (try ${attempt + 1}); again`);
        }
    }
}

async function gotoLine(spec) {
    await focusEditor();
    await page.keyboard.press('Control+G');
    const input = page.locator('.quick-input-widget input');
    await input.waitFor({ timeout: 10000 });
    await input.fill(`:${spec}`);
    await page.waitForTimeout(200);
    await page.keyboard.press('Enter');
    await page.locator('.quick-input-widget').waitFor({ state: 'hidden', timeout: 10000 });
}

async function runFromPalette(title) {
    const input = page.locator('.quick-input-widget input');
    for (let attempt = 0; ; attempt++) {
        await page.keyboard.press('Control+Shift+P');
        try {
            await input.waitFor({ timeout: 5000 });
            break;
        } catch (e) {
            // focus was lost (a closed modal editor, a notification): put it back in the editor
            if (attempt === 2) throw e;
            await page.keyboard.press('Escape');
            await page.keyboard.press('Control+1');
        }
    }
    await input.fill(`>${title}`);
    const item = page.locator('.quick-input-widget .monaco-list-row', { hasText: title });
    await item.first().waitFor({ timeout: 15000 });
    await page.keyboard.press('Enter');
}

const seedPath = path.join(WS, SEED);
async function trusted() {
    await gotoLine('28:5');
    await page.waitForTimeout(300);
    await shot('vscode-diagnostics.png');

    // 2. quick fix through the lightbulb menu (Ctrl+.) on DDP101, then save
    await gotoLine('32:14');
    await page.keyboard.press('Control+.');
    const fixItem = page.locator('.action-widget .monaco-list-row', { hasText: 'Size the list to the world size' });
    await fixItem.first().waitFor({ timeout: 20000 });
    const menu = (await page.locator('.action-widget .monaco-list-row').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim());
    log(`quick fix menu:\n  ${menu.join('\n  ')}`);
    await fixItem.first().click();
    await page.keyboard.press('Control+S');
    let text = '';
    for (let i = 0; i < 100; i++) {
        text = fs.readFileSync(seedPath, 'utf8');
        if (text.includes('range(dist.get_world_size())')) break;
        await page.waitForTimeout(100);
    }
    if (!text.includes('output = [None for _ in range(dist.get_world_size())]')) {
        fail(`quick fix not applied and saved: ${JSON.stringify(text.split('\n').slice(28, 34))}`);
    }
    if (text.includes('output = [None for _ in gather_objects]')) fail('old output list still on disk');
    log('quick fix applied and saved to disk');
    await staticRow('DDP101').first().waitFor({ state: 'detached', timeout: 30000 });
    log('DDP101 gone from the Problems panel; DDP001 still there: '
        + String(await problemRow('DDP001').count() > 0));

    // 3. ddp-lint.run from the command palette -> the runtime finding in the Problems panel
    await openFile(RUN_FILE);
    await runFromPalette('ddp-lint: Run Current File with torchrun');
    log(`ddp-lint.run started on ${RUN_FILE}`);
    // the status bar item follows the run (its text is "ddp-lint: <progress>" while it lasts)
    const runStatus = page.locator('.statusbar-item', { hasText: 'ddp-lint:' });
    await runStatus.first().waitFor({ timeout: 15000 });
    log(`status bar during the run: ${(await runStatus.first().innerText()).replace(/\s+/g, ' ')}`);
    const runtimeRow = problemRow(RUN_CODE);
    await runtimeRow.first().waitFor({ timeout: 150000 });
    const after = await rowTexts();
    const rt = after.find((r) => r.includes(RUN_CODE));
    log(`runtime finding: ${rt}`);
    if (!/ddp-lint \(runtime\)/.test(rt)) fail(`runtime finding without source "ddp-lint (runtime)": ${rt}`);
    if (process.env.RUN_TEXT && !rt.includes(process.env.RUN_TEXT)) fail(`runtime finding without "${process.env.RUN_TEXT}": ${rt}`);
    if (process.env.RUN_LINE && !rt.includes(`[Ln ${process.env.RUN_LINE},`)) fail(`runtime finding not at line ${process.env.RUN_LINE}: ${rt}`);
    await page.waitForTimeout(500);
    await shot('vscode-run.png');

    // 4. ddp-lint.fixAll from the command palette: the remaining safe fix (DDP001's set_device)
    await openFile(SEED);
    await runFromPalette('ddp-lint: Fix All Auto-fixable Problems');
    const fixed001 = page.locator('.monaco-editor .view-line', { hasText: 'torch.cuda.set_device(device_id)' });
    await fixed001.first().waitFor({ timeout: 20000 });
    await focusEditor();
    await page.keyboard.press('Control+S');
    let after001 = '';
    for (let i = 0; i < 100; i++) {
        after001 = fs.readFileSync(seedPath, 'utf8');
        if (after001.includes('torch.cuda.set_device(device_id)')) break;
        await page.waitForTimeout(100);
    }
    if (!after001.includes('torch.cuda.set_device(device_id)')) fail(`fix all not applied: ${after001}`);
    await staticRow('DDP001').first().waitFor({ state: 'detached', timeout: 30000 });
    log('fix all applied (set_device inserted), saved, DDP001 gone');
}
// VS Code rewrites settings.json in place: a read can catch it empty or half-written
function readJsonSafe(file) {
    try { return JSON.parse(fs.readFileSync(file, 'utf8')); } catch { return null; }
}
async function setUserSetting(key, value) {
    const settingsFile = env('USER_SETTINGS');
    let settings = readJsonSafe(settingsFile);
    for (let i = 0; i < 100 && settings === null; i++) {
        await page.waitForTimeout(100);
        settings = readJsonSafe(settingsFile);
    }
    if (settings === null) fail(`user settings.json is not valid JSON: ${fs.readFileSync(settingsFile, 'utf8')}`);
    settings[key] = value;
    const text = JSON.stringify(settings, null, 2);
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new globalThis.URL(URL).origin });
    await runFromPalette('Preferences: Open User Settings (JSON)');
    // (VS Code 1.139 opens it in a modal editor, not a tab: click one of its lines)
    const line = page.locator('.monaco-editor .view-line', { hasText: 'ddp-lint.run.nproc' }).first();
    await line.waitFor({ timeout: 20000 });
    await page.evaluate((t) => navigator.clipboard.writeText(t), text);
    await line.click();
    await page.keyboard.press('Control+A');
    await page.keyboard.press('Control+V');
    await page.keyboard.press('Control+S');
    const want = JSON.stringify(value);
    const saved = () => JSON.stringify((readJsonSafe(settingsFile) || {})[key]);
    for (let i = 0; i < 100 && saved() !== want; i++) {
        await page.waitForTimeout(100);
    }
    if (saved() !== want) fail(`user settings.json not saved with ${key}`);
    log(`user setting ${key} = ${want}`);
    await page.keyboard.press('Escape');
}

async function untrusted() {
    const restricted = page.locator('.statusbar-item', { hasText: 'Restricted Mode' });
    await restricted.first().waitFor({ timeout: 10000 });
    log('workspace is in Restricted Mode');
    await openFile(RUN_FILE);
    await runFromPalette('ddp-lint: Run Current File with torchrun');
    const toast = page.locator('.notifications-toasts .notification-toast', { hasText: 'untrusted workspace' });
    await toast.first().waitFor({ timeout: 20000 });
    log(`run refused: ${(await toast.first().innerText()).replace(/\s+/g, ' ')}`);
    if (!/Manage Workspace Trust/.test(await toast.first().innerText())) fail('no "Manage Workspace Trust" action');
    await page.waitForTimeout(4000);
    if (await problemRow(RUN_CODE).count() > 0) fail(`a runtime finding appeared in an untrusted workspace`);
    await shot('vscode-untrusted.png');

    // a broken interpreter setting, typed the way a user would (the user settings.json editor):
    // the settings change restarts the server, the probe fails, and the user gets one notification
    // with one action, and an error in the status bar
    await setUserSetting('ddp-lint.interpreter', ['/nonexistent/python3']);
    const bad = page.locator('.notifications-toasts .notification-toast', { hasText: 'No Python interpreter found' });
    await bad.first().waitFor({ timeout: 30000 });
    const badText = (await bad.first().innerText()).replace(/\s+/g, ' ');
    log(`bad interpreter: ${badText}`);
    if (!/\/nonexistent\/python3/.test(badText) || !/Select Interpreter/.test(badText)) fail(`unclear error: ${badText}`);
    const errStatus = page.locator('.statusbar-item', { hasText: 'ddp-lint' });
    const label = await errStatus.first().getAttribute('aria-label');
    log(`status bar: ${label}`);
    if (!/No Python interpreter found/.test(label || '')) fail(`status bar does not show the error: ${label}`);

    // a server that keeps crashing (CRASHY passes the probe, then the server dies 1 s after it
    // starts): a few automatic restarts, then it stays down with one notification, no endless loop
    await setUserSetting('ddp-lint.interpreter', [env('CRASHY')]);
    const crashed = page.locator('.notifications-toasts .notification-toast', { hasText: 'crashed' });
    await crashed.first().waitFor({ timeout: 90000 });
    const crashedText = (await crashed.first().innerText()).replace(/\s+/g, ' ');
    log(`crash loop stopped: ${crashedText}`);
    if (!/Show Logs/.test(crashedText)) fail(`no "Show Logs" action: ${crashedText}`);
    await page.waitForTimeout(4000); // no restart may follow (checked in the log by the pytest side)
}
// A notebook (NOTEBOOK, MODE=notebook): cell diagnostics in the Problems panel, a quick fix applied
// from the cell with Ctrl+., the notebook saved, its cell source checked on disk.
async function notebook() {
    const name = env('NOTEBOOK');
    await page.locator('.explorer-folders-view .monaco-list-row', { hasText: name }).first().click({ timeout: 60000 });
    await page.locator('.tabs-container .tab.active', { hasText: name }).waitFor({ timeout: 30000 });
    const cellEditor = page.locator('.notebook-editor .cell-editor-container .monaco-editor').first();
    try {
        await cellEditor.waitFor({ timeout: 15000 });
    } catch {
        // opened as JSON text (the notebook serializer was not there yet): reopen it as a notebook
        log('opened as text; reopening with the Jupyter Notebook editor');
        await runFromPalette('View: Reopen Editor With...');
        const pick = page.locator('.quick-input-widget .monaco-list-row', { hasText: 'Jupyter Notebook' });
        await pick.first().waitFor({ timeout: 15000 });
        await pick.first().click();
        await cellEditor.waitFor({ timeout: 60000 });
    }
    log('notebook editor open');
    await page.keyboard.press('Control+Shift+M');
    await staticRow('DDP101').first().waitFor({ timeout: 90000 });
    const rows = await rowTexts();
    log(`problems panel:\n  ${rows.join('\n  ')}`);
    const r101 = rows.find((r) => /DDP101/.test(r) && /\[Ln/.test(r));
    // line 1 of its cell (the cell's own coordinates), column 14: `[None for _ in gather_objects]`
    if (!/\[Ln 1, Col 10\]/.test(r101)) fail(`DDP101 not at line 1, col 10 of its cell: ${r101}`);
    // the finding's cell: the Problems panel reveals it in the notebook; a double click puts the
    // cursor in the cell, at the finding, for the quick fix menu (Ctrl+.)
    await staticRow('DDP101').first().click();
    await page.waitForTimeout(1000);
    await shot('vscode-notebook-diagnostics.png');
    await staticRow('DDP101').first().dblclick();
    await page.locator('.notebook-editor .monaco-editor.focused').first().waitFor({ timeout: 10000 });
    await page.waitForTimeout(500);
    await page.keyboard.press('Control+.');
    const fixItem = page.locator('.action-widget .monaco-list-row', { hasText: 'Size the list to the world size' });
    await fixItem.first().waitFor({ timeout: 20000 });
    await fixItem.first().click();
    const fixed = page.locator('.notebook-editor .view-line', { hasText: 'range(dist.get_world_size())' });
    await fixed.first().waitFor({ timeout: 20000 });
    await page.keyboard.press('Control+S');
    const nbPath = path.join(WS, name);
    let text = '';
    for (let i = 0; i < 100; i++) {
        text = fs.readFileSync(nbPath, 'utf8');
        if (text.includes('range(dist.get_world_size())')) break;
        await page.waitForTimeout(100);
    }
    if (!text.includes('range(dist.get_world_size())')) fail(`quick fix not saved in the notebook: ${text}`);
    log('quick fix applied in the cell and the notebook saved');
    await staticRow('DDP101').first().waitFor({ state: 'detached', timeout: 30000 });
    await page.waitForTimeout(500);
    await shot('vscode-notebook-fixed.png');

    // code lenses (ddp-lint.codeLens, on by default in VS Code) above the seed's __main__ block
    await openFile(SEED);
    await gotoLine('30:1');  // (lenses render only in the visible lines: the __main__ block is line 25)
    const lens = page.locator('.monaco-editor .codelens-decoration', { hasText: 'Run with 2 ranks (emulated)' });
    await lens.first().waitFor({ timeout: 30000 });
    const lensTexts = (await page.locator('.monaco-editor .codelens-decoration').allInnerTexts())
        .map((x) => x.replace(/\s+/g, ' ').trim());
    log(`code lenses: ${lensTexts.join(' || ')}`);
    if (!lensTexts.some((x) => x.includes('Run with torchrun'))) fail(`no "Run with torchrun" lens: ${lensTexts}`);
    await shot('vscode-codelens.png');
}

try {
    await page.goto(URL);
    await page.waitForSelector('.monaco-workbench', { timeout: 90000 });
    log('workbench loaded');
    if (MODE === 'notebook') {
        await notebook();
        log('PASS');
        await browser.close();
        process.exit(0);
    }

    // 1. static diagnostics in the Problems panel (in restricted mode too)
    await openFile(SEED);
    await page.keyboard.press('Control+Shift+M');
    await problemRow('DDP001').first().waitFor({ timeout: 90000 });
    await problemRow('DDP101').first().waitFor({ timeout: 30000 });
    const rows = await rowTexts();
    log(`problems panel:\n  ${rows.join('\n  ')}`);
    const r001 = rows.find((r) => r.includes('DDP001'));
    const r101 = rows.find((r) => r.includes('DDP101'));
    if (!/\[Ln 28, Col 5\]/.test(r001)) fail(`DDP001 not at line 28, col 5: ${r001}`);
    if (!/\[Ln 32, Col 14\]/.test(r101)) fail(`DDP101 not at line 32, col 14: ${r101}`);
    if (!/ddp-lint/.test(r001)) fail(`source is not ddp-lint: ${r001}`);
    // (the "gone" checks below wait for these rows to detach: make sure they match first)
    if (await staticRow('DDP001').count() !== 1 || await staticRow('DDP101').count() !== 1) fail('staticRow() does not match the rows');
    const status = page.locator('.statusbar-item', { hasText: 'ddp-lint' });
    await status.first().waitFor({ timeout: 10000 });
    log(`status bar: ${await status.first().getAttribute('aria-label')}`);
    if (MODE === 'untrusted') {
        await untrusted();
    } else {
        await trusted();
    }
    log('PASS');
} catch (e) {
    try { await shot('failure.png'); } catch { /* ignore */ }
    console.error('FAIL: ' + (e instanceof Fail ? e.message : (e.stack || e)));
    await browser.close();
    process.exit(1);
}
await browser.close();
