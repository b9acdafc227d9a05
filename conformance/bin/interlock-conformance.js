#!/usr/bin/env node
/**
 * interlock-conformance: the conformance suite for stateless Streamable HTTP MCP servers, the
 * InterLock V1 contract and governed SQL gateways. Inside a source checkout (cli.ts beside bin/) it
 * registers tsx and runs the TypeScript sources, so a stale dist/ is never used; an installed package
 * ships only the compiled dist/.
 * Exit codes are listed in README.md ("Exit codes").
 */
'use strict';
const fs = require('node:fs');
const path = require('node:path');

let cli;
if (fs.existsSync(path.join(__dirname, '..', 'cli.ts'))) {
  require('tsx/cjs');
  cli = require('../cli.ts');
} else {
  cli = require(path.join(__dirname, '..', 'dist', 'cli.js'));
}

cli.main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`interlock-conformance: ${err && err.stack ? err.stack : err}\n`);
    process.exitCode = 2;
  },
);
