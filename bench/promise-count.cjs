/**
 * Promises created per HTTP request in a gateway (issue 28 item 3, "count awaits per call"): a
 * preload for `interlock serve`, loaded through NODE_OPTIONS by any bench that starts gateways, e.g.
 *   NODE_OPTIONS="--require $PWD/bench/promise-count.cjs" BEFORE_ROOT=… npx tsx bench/cost-per-call.ts
 * In a process whose argv holds `serve` it counts every promise V8 creates (async_hooks PROMISE init:
 * each `new Promise`, `then`/`catch`/`finally`, async function call and `await`), and from the
 * PROMISE_COUNT_FROM-th request (default 1,000: start-up and warm-up left out) on writes `<checkout> <script> requests N promises/request X` to
 * `$PROMISE_COUNT_DIR/promise-count-<pid>.txt` (default /tmp) every 500 requests. Exact, not
 * sampled, so it needs no same-run pairing; the hook slows the gateway, so read no CPU figure of
 * such a run. In other processes (the bench driver) it does nothing.
 */
'use strict';
if (process.argv.includes('serve')) {
  const hooks = require('node:async_hooks');
  const http = require('node:http');
  const fs = require('node:fs');
  const path = require('node:path');
  const out = path.join(process.env.PROMISE_COUNT_DIR || '/tmp', `promise-count-${process.pid}.txt`);
  let promises = 0;
  let requests = 0;
  const from = Number(process.env.PROMISE_COUNT_FROM || 1000);
  let mark = null;
  hooks.createHook({ init(_id, type) { if (type === 'PROMISE') promises++; } }).enable();
  const emit = http.Server.prototype.emit;
  http.Server.prototype.emit = function countingEmit(event, ...args) {
    if (event === 'request') {
      requests++;
      if (requests === from) mark = { promises, requests };
      if (mark && requests % 500 === 0) {
        const n = requests - mark.requests;
        fs.writeFileSync(out, `${process.cwd()} ${process.argv[1]} requests ${n} promises/request ${((promises - mark.promises) / n).toFixed(2)}\n`);
      }
    }
    return emit.call(this, event, ...args);
  };
}
