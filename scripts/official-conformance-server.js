/**
 * Starts an InterLock gateway with the test-only conformance fixture pack for
 * scripts/official-conformance.sh, and keeps it running until SIGTERM/SIGINT.
 *
 * Run with tsx (it loads the TypeScript sources):
 *   node node_modules/tsx/dist/cli.mjs scripts/official-conformance-server.js --url-file <path>
 *
 * It uses the same factory as the tests (test/helpers/server.ts → startTestServer({ fixtures: true })),
 * which binds 127.0.0.1 on a free port. When the server is ready, its MCP URL
 * (http://127.0.0.1:PORT/mcp) is written to --url-file (atomically) and printed on stdout.
 */
'use strict';

const fs = require('node:fs');
const path = require('node:path');

/** Returns the value of `--name <value>` from argv, or undefined. */
function option(name) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function main() {
  const urlFile = option('url-file');
  const helper = path.join(__dirname, '..', 'test', 'helpers', 'server');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { startTestServer } = require(helper);
  if (typeof startTestServer !== 'function') throw new Error(`${helper} does not export startTestServer`);
  const server = await startTestServer({ fixtures: true });
  const host = new URL(server.url).hostname;
  if (host !== '127.0.0.1') throw new Error(`expected the gateway on 127.0.0.1, got ${server.url}`);

  let closing = false;
  const stop = async (signal) => {
    if (closing) return;
    closing = true;
    process.stdout.write(`[official-conformance-server] ${signal}: closing\n`);
    try {
      await server.close();
    } finally {
      process.exit(0);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));

  if (urlFile) {
    fs.writeFileSync(`${urlFile}.tmp`, server.url);
    fs.renameSync(`${urlFile}.tmp`, urlFile);
  }
  process.stdout.write(`[official-conformance-server] listening at ${server.url} (fixtures on)\n`);
}

main().catch((err) => {
  process.stderr.write(`[official-conformance-server] failed to start: ${err && err.stack ? err.stack : String(err)}\n`);
  process.exit(1);
});
