#!/usr/bin/env node
/**
 * Builds the publishable package: compiles the suite's TypeScript to dist/ (CommonJS with type
 * declarations) and copies the three contract files the suite reads (protocol-v1.json,
 * errors-v1.json, mcp-tools-v1.json) from the repository's spec/ into dist/contract/, so an
 * installed package needs neither a TypeScript runtime nor the repository. Runs on `npm pack`
 * (prepack). Exit code 1 when compilation fails or a contract file is missing.
 */
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.resolve(__dirname, '..');
const dist = path.join(pkg, 'dist');
fs.rmSync(dist, { recursive: true, force: true });

const tsc = require.resolve('typescript/bin/tsc', { paths: [pkg] });
const r = spawnSync(process.execPath, [tsc, '-p', path.join(pkg, 'tsconfig.build.json')], { stdio: 'inherit' });
if (r.status !== 0) process.exit(1);

const specDir = path.resolve(pkg, '..', 'spec');
const contract = path.join(dist, 'contract');
fs.mkdirSync(contract, { recursive: true });
for (const f of ['protocol-v1.json', 'errors-v1.json', 'mcp-tools-v1.json']) {
  const from = path.join(specDir, f);
  if (!fs.existsSync(from)) {
    console.error(`build: ${from} is missing`);
    process.exit(1);
  }
  fs.copyFileSync(from, path.join(contract, f));
}
console.log(`build: dist/ written (contract from ${path.relative(process.cwd(), specDir) || '.'})`);
