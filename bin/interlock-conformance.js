#!/usr/bin/env node
/**
 * interlock-conformance: the contract conformance suite for any MCP V1 endpoint.
 * Registers tsx so the TypeScript sources in conformance/ run without a build step.
 * See conformance/README.md.
 */
'use strict';
require('tsx/cjs');
const { main } = require('../conformance/cli.ts');

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`interlock-conformance: ${err && err.stack ? err.stack : err}\n`);
    process.exitCode = 2;
  },
);
