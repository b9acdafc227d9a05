#!/usr/bin/env node
/**
 * `interlock`: the operator CLI and the gateway launcher (src/cli/main.ts). Runs the compiled
 * JavaScript in dist/ when it is up to date with the sources, else the sources through tsx
 * (bin/runtime.js decides; issue 13). Exit codes: 0 ok, 2 bad usage or invalid input, 3 not found,
 * 4 an approval not confirmed (approval approve without a terminal and without --yes), 1 other errors.
 */
'use strict';
const path = require('node:path');
const { chooseRuntime } = require('./runtime');

const root = path.resolve(__dirname, '..');
let runtime;
try {
  runtime = chooseRuntime(root);
} catch (err) {
  process.stderr.write(`error: ${err.message}\n`);
  process.exit(2);
}
if (runtime.kind === 'source') require('tsx/cjs');
const srcDir = runtime.kind === 'compiled' ? path.join(runtime.dir, 'src') : path.join(root, 'src');
const ext = runtime.kind === 'compiled' ? '.js' : '.ts';
const load = (rel) => require(path.join(srcDir, rel + ext));
if (process.env.INTERLOCK_RUNTIME_REPORT === '1') process.stderr.write(`interlock runtime: ${runtime.kind}${runtime.kind === 'compiled' ? ` ${runtime.dir}` : ` (${runtime.reason})`}\n`);
const { runCli } = load('cli/main');

// The gateway keeps serving whatever escapes a call (issue 10, Build 2): log it, never exit on it.
if (['serve', 'demo'].includes(process.argv[2])) {
  const pino = require('pino');
  const { installLastResortHandlers } = load('server');
  const { createLogger } = load('observability/logger');
  installLastResortHandlers(createLogger(undefined, pino.destination(2)));
}

runCli(process.argv.slice(2)).then(
  (code) => {
    // Let stdout/stderr drain before exiting (pipes are asynchronous).
    process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
  },
  (err) => {
    process.stderr.write(`error: ${err && err.message ? err.message : String(err)}\n`, () => process.exit(1));
  },
);
