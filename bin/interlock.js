#!/usr/bin/env node
/**
 * `interlock`: the operator CLI and the gateway launcher (src/cli/main.ts), run through tsx.
 * Exit codes: 0 ok, 2 bad usage or invalid input, 3 not found, 1 other errors.
 */
'use strict';
require('tsx/cjs');
const { runCli } = require('../src/cli/main.ts');

// The gateway keeps serving whatever escapes a call (issue 10, Build 2): log it, never exit on it.
if (['serve', 'demo'].includes(process.argv[2])) {
  const pino = require('pino');
  const { installLastResortHandlers } = require('../src/server.ts');
  const { createLogger } = require('../src/observability/logger.ts');
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
