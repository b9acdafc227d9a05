/**
 * Summary and verdict for scripts/official-conformance.sh (Node 20, CommonJS, no TypeScript).
 *
 * Reads the suite's per-scenario checks.json files of each run, the checked-in baseline and the suite's
 * frozen requirement sets, prints per-run totals, and exits non-zero when
 *   - the suite itself exited non-zero for a run (a new failure, a stale baseline entry, or a crash),
 *   - a must-pass scenario has a failing check that is not baselined by check id (this also covers the
 *     suite's unscored "pending" scenarios we require, e.g. http-header-validation),
 *   - a must-pass scenario is baselined as a whole, or did not run in any revision,
 *   - a baseline entry has no reason comment.
 *
 * Usage: node scripts/official-conformance-summary.js --baseline <yml>
 *          --run <rev>=<dir> [--run …] [--suite-exit <rev>=<code> …] [--suite-log <rev>=<file> …]
 *          --requirements-dir <suite package>/requirements
 */
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const YAML = require('yaml');

/**
 * Scenarios InterLock must pass outright (only individual checks may be baselined, each with a
 * contract reason). Scenarios the suite leaves unscored ("pending") are listed here too, so they are
 * enforced by this script even though the suite's own exit code ignores them.
 */
const MUST_PASS = [
  'server-initialize',
  'ping',
  'tools-list',
  'tools-call-simple-text',
  'tools-call-image',
  'tools-call-audio',
  'tools-call-embedded-resource',
  'tools-call-mixed-content',
  'tools-call-error',
  'tools-call-with-progress',
  'server-stateless',
  'http-header-validation',
  'dns-rebinding-protection',
  'caching',
  'json-schema-2020-12',
];

const FAILING = new Set(['FAILURE', 'WARNING']);

/** Parses repeated `--name key=value` options into a Map, and single `--name value` options. */
function parseArgs(argv) {
  const multi = { run: new Map(), 'suite-exit': new Map(), 'suite-log': new Map() };
  const single = {};
  for (let i = 2; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '');
    const value = argv[++i];
    if (value === undefined) throw new Error(`missing value for --${name}`);
    if (name in multi) {
      const eq = value.indexOf('=');
      if (eq < 0) throw new Error(`--${name} expects <revision>=<value>`);
      multi[name].set(value.slice(0, eq), value.slice(eq + 1));
    } else single[name] = value;
  }
  return { ...single, ...multi };
}

/**
 * Loads the baseline. Returns entries ({scenario, checkId?, raw}) and the entries lacking a reason
 * comment: a reason is a comment directly above the entry, or above the first entry of its group
 * (a group ends at a blank line).
 */
function loadBaseline(file) {
  const doc = YAML.parseDocument(fs.readFileSync(file, 'utf8'));
  if (doc.errors.length) throw new Error(`${file}: ${doc.errors[0].message}`);
  const seq = doc.get('server', true);
  const entries = [];
  const unexplained = [];
  if (!seq || !Array.isArray(seq.items)) return { entries, unexplained };
  let groupHasReason = Boolean(seq.commentBefore);
  seq.items.forEach((item, index) => {
    if (item.commentBefore) groupHasReason = true;
    else if (index > 0 && item.spaceBefore) groupHasReason = false;
    const raw = String(item.value);
    const colon = raw.indexOf(':');
    entries.push(colon < 0 ? { scenario: raw, raw } : { scenario: raw.slice(0, colon), checkId: raw.slice(colon + 1), raw });
    if (!groupHasReason) unexplained.push(raw);
  });
  return { entries, unexplained };
}

/** The suite's frozen requirement set for `revision`: scored server scenarios and unscored ones with reasons. */
function loadRequirements(dir, revision) {
  const file = path.join(dir, `${revision}.yaml`);
  if (!fs.existsSync(file)) throw new Error(`no requirement set ${file}`);
  const req = YAML.parse(fs.readFileSync(file, 'utf8')) || {};
  const notScored = new Map();
  for (const e of req.not_scored || []) if (e.leg === 'server') notScored.set(e.scenario, e.reason);
  return { scored: new Set(req.server || []), notScored };
}

/** Reads every `<dir>/server-<scenario>-<timestamp>/checks.json` of one run. */
function loadRun(dir) {
  const scenarios = new Map();
  if (!fs.existsSync(dir)) return scenarios;
  for (const sub of fs.readdirSync(dir).sort()) {
    const m = /^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$/.exec(sub);
    const file = path.join(dir, sub, 'checks.json');
    if (!m || !fs.existsSync(file)) continue;
    let checks;
    try {
      checks = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch {
      checks = [{ id: m[1], status: 'FAILURE', errorMessage: 'checks.json is not valid JSON' }];
    }
    scenarios.set(m[1], checks);
  }
  return scenarios;
}

/** Classifies one scenario's checks against the baseline. */
function classify(scenario, checks, baseline) {
  const whole = baseline.entries.some((e) => e.scenario === scenario && !e.checkId);
  const perCheck = new Set(baseline.entries.filter((e) => e.scenario === scenario && e.checkId).map((e) => e.checkId));
  const failing = checks.filter((c) => FAILING.has(c.status));
  const unexpected = whole ? [] : failing.filter((c) => !perCheck.has(c.id));
  const passed = checks.filter((c) => c.status === 'SUCCESS').length;
  let state;
  if (failing.length === 0) state = whole ? 'STALE' : 'pass';
  else if (unexpected.length === 0) state = 'baselined';
  else state = 'FAIL';
  return { state, whole, passed, failed: failing.length, failing, unexpected };
}

function main() {
  const args = parseArgs(process.argv);
  if (!args.baseline || args.run.size === 0) throw new Error('usage: --baseline <yml> --run <rev>=<dir> …');
  const reqDir = args['requirements-dir'];
  if (!reqDir) throw new Error('--requirements-dir <suite>/requirements is required');
  const baseline = loadBaseline(args.baseline);
  const problems = [];

  for (const raw of baseline.unexplained) problems.push(`baseline entry without a reason comment: ${raw}`);
  for (const e of baseline.entries) {
    if (!e.checkId && MUST_PASS.includes(e.scenario)) problems.push(`must-pass scenario baselined as a whole: ${e.raw} (baseline single checks, with a contract reason)`);
  }

  const seenMustPass = new Set();
  for (const [revision, dir] of args.run) {
    const req = loadRequirements(reqDir, revision);
    const run = loadRun(dir);
    const rows = [];
    const totals = { scored: 0, pass: 0, baselined: 0, fail: 0, stale: 0, checksPassed: 0, checksFailed: 0, notScored: 0, notScoredFailing: 0 };
    for (const [scenario, checks] of run) {
      const r = classify(scenario, checks, baseline);
      const scored = req.scored.has(scenario);
      const mustPass = MUST_PASS.includes(scenario);
      if (mustPass) seenMustPass.add(scenario);
      totals.checksPassed += r.passed;
      totals.checksFailed += r.failed;
      if (scored) {
        totals.scored++;
        if (r.state === 'pass') totals.pass++;
        else if (r.state === 'baselined') totals.baselined++;
        else if (r.state === 'STALE') totals.stale++;
        else totals.fail++;
      } else {
        totals.notScored++;
        if (r.failed > 0) totals.notScoredFailing++;
      }
      if (mustPass && r.unexpected.length > 0) {
        for (const c of r.unexpected) problems.push(`[${revision}] must-pass ${scenario}: ${c.status} ${c.id}: ${String(c.errorMessage || '').slice(0, 300)}`);
      } else if (scored && r.state === 'FAIL') {
        for (const c of r.unexpected) problems.push(`[${revision}] new failure ${scenario}: ${c.status} ${c.id}: ${String(c.errorMessage || '').slice(0, 300)}`);
      }
      if (scored && r.state === 'STALE') problems.push(`[${revision}] stale baseline entry: ${scenario} now passes`);
      rows.push({ scenario, scored, reason: req.notScored.get(scenario), mustPass, ...r });
    }
    // A per-check entry is stale when that check ran and succeeded (the suite applies the same rule).
    for (const e of baseline.entries.filter((x) => x.checkId && req.scored.has(x.scenario) && run.has(x.scenario))) {
      const c = run.get(e.scenario).find((x) => x.id === e.checkId && x.status !== 'INFO');
      if (c && c.status === 'SUCCESS') problems.push(`[${revision}] stale baseline entry: ${e.raw} now passes`);
    }
    for (const s of req.scored) if (!run.has(s)) problems.push(`[${revision}] scored scenario did not run: ${s}`);

    const exit = args['suite-exit'].get(revision);
    console.log(`\n=== official conformance, --requirements ${revision} ===`);
    for (const r of rows) {
      const tag = r.scored ? r.state : `not scored (${r.reason || 'n/a'}): ${r.failed === 0 ? 'pass' : 'fail'}`;
      const mark = r.state === 'pass' ? '✓' : r.state === 'baselined' ? '~' : r.scored ? '✗' : r.failed === 0 ? '✓' : '·';
      const why = r.state === 'baselined' && !r.whole ? ` [baselined checks: ${r.failing.map((c) => c.id).join(', ')}]` : '';
      console.log(`  ${mark} ${r.scenario}${r.mustPass ? ' (must pass)' : ''}: ${tag}, checks ${r.passed} passed / ${r.failed} failing${why}`);
    }
    console.log(
      `  scored scenarios: ${totals.scored} = ${totals.pass} passed + ${totals.baselined} baselined + ${totals.fail} failed` +
        (totals.stale ? ` + ${totals.stale} stale` : '') +
        `; not scored: ${totals.notScored} run, ${totals.notScoredFailing} failing; checks: ${totals.checksPassed} passed, ${totals.checksFailed} failing (FAILURE or WARNING; the suite counts WARNING apart)`,
    );
    const logFile = args['suite-log'].get(revision);
    if (logFile && fs.existsSync(logFile)) {
      const total = /Total: \d+ passed, \d+ failed/.exec(fs.readFileSync(logFile, 'utf8'));
      if (total) console.log(`  suite's own count: ${total[0]}`);
    }
    if (exit !== undefined) {
      console.log(`  suite exit code with the baseline: ${exit}`);
      if (exit !== '0') problems.push(`[${revision}] the suite exited ${exit} (new failure, stale entry or crash; see ${logFile || 'its output'})`);
    }
  }
  for (const s of MUST_PASS) if (!seenMustPass.has(s)) problems.push(`must-pass scenario did not run in any revision: ${s}`);

  if (problems.length > 0) {
    console.log(`\nFAILED (${problems.length}):`);
    for (const p of problems) console.log(`  - ${p}`);
    process.exit(1);
  }
  console.log('\nOK: no new failures, no stale baseline entries, every must-pass scenario passed.');
}

try {
  main();
} catch (err) {
  console.error(`official-conformance-summary: ${err && err.message ? err.message : String(err)}`);
  process.exit(2);
}
