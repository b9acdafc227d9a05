#!/usr/bin/env node
/**
 * npm run build: compiles src/ and generated/ into dist/ with tsc (tsconfig.build.json), copies the
 * plain-JavaScript validators that tsc does not emit, and stamps the tree with the time the build
 * started, so bin/runtime.js runs it only while no source is newer. Also run by `prepare` (npm ci,
 * npm install); there `--if-possible` skips the build with a note when TypeScript is not installed
 * (the CLI then runs the sources through tsx), and `--if-stale` skips it when the tree is one
 * bin/runtime.js would run (built, and no file under src/, generated/ or spec/ newer than its stamp)
 * and was built from these very sources (its .built-from digest, bin/runtime.js sourcesDigest):
 * npm runs `prepare` again for `npm exec -- interlock …` in the clone, which rebuilt the tree that
 * `npm ci` had just made (task hnu42b item 6: the first CLI command after `npm ci` took 24–40 s).
 *
 *   node scripts/build.js [--out DIR] [--if-possible] [--if-stale]
 */
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { STAMP, DIGEST, chooseRuntime, sourceDirs, sourcesDigest } = require('../bin/runtime');

const root = path.resolve(__dirname, '..');
const args = process.argv.slice(2);
const outIndex = args.indexOf('--out');
const out = outIndex >= 0 ? path.resolve(args[outIndex + 1]) : path.join(root, 'dist');
const ifPossible = args.includes('--if-possible');

if (args.includes('--if-stale')) {
  // The same judgement as bin/runtime.js, on this tree, whatever INTERLOCK_RUNTIME says.
  // chooseRuntime trusts a tree only when it records the digest of exactly these sources (red team
  // rt42b: sources replaced by older-dated files, e.g. an extracted release archive, or deleted).
  const current = chooseRuntime(root, { INTERLOCK_DIST_DIR: out });
  if (current.kind === 'compiled') {
    process.stdout.write(`interlock build: ${path.relative(root, out) || out} is up to date with the sources; not rebuilt (npm run build forces it)\n`);
    process.exit(0);
  }
}

let tsc;
try {
  tsc = require.resolve('typescript/bin/tsc', { paths: [root] });
} catch {
  if (ifPossible) {
    process.stdout.write('interlock build: TypeScript is not installed; the CLI will run the sources through tsx\n');
    process.exit(0);
  }
  process.stderr.write('interlock build: TypeScript is not installed (npm ci installs it)\n');
  process.exit(1);
}

const started = Date.now();
const digest = sourcesDigest(root, sourceDirs(root));
fs.rmSync(out, { recursive: true, force: true });
try {
  execFileSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.build.json'), '--outDir', out], { cwd: root, stdio: 'inherit' });
} catch {
  fs.rmSync(out, { recursive: true, force: true });
  process.stderr.write('interlock build: tsc failed; nothing was written to ' + out + '\n');
  process.exit(1);
}
for (const f of fs.readdirSync(path.join(root, 'generated'))) {
  if (f.endsWith('.js')) fs.copyFileSync(path.join(root, 'generated', f), path.join(out, 'generated', f));
}
fs.writeFileSync(path.join(out, STAMP), String(started));
fs.writeFileSync(path.join(out, DIGEST), digest);
process.stdout.write(`interlock build: compiled JavaScript in ${path.relative(root, out) || out} (${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
