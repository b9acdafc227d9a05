/**
 * Node internals per HTTP request in a gateway (issue 28 item 3, h28e): a preload for
 * `interlock serve`, loaded through NODE_OPTIONS like bench/promise-count.cjs, e.g.
 *   NODE_OPTIONS="--require $PWD/bench/internals-count.cjs" BENCH_ROUNDS=1 npx tsx bench/cost-per-call.ts
 * In a process whose argv holds `serve` (or bench/lib/node-floor-server.ts, BENCH_FLOOR=1) it counts, per HTTP request from the INTERNALS_COUNT_FROM-th on
 * (default 1,000), every EventEmitter emit by emitter class and event name, every listener added
 * (on/once/prependListener) by class and event, setTimeout / setImmediate / process.nextTick calls, and
 * every hash and HMAC (crypto.createHash, crypto.hash, crypto.createHmac) by algorithm, and writes the
 * table to `$INTERNALS_COUNT_DIR/internals-count-<pid>.txt` (default /tmp) every 500 requests. Exact, not
 * sampled; the wrappers slow the gateway, so read no CPU figure of such a run. Elsewhere it does nothing.
 */
'use strict';
if (process.argv.includes('serve') || process.argv.some((a) => a.includes('node-floor-server'))) {
  const events = require('node:events');
  const http = require('node:http');
  const crypto = require('node:crypto');
  const timers = require('node:timers');
  const fs = require('node:fs');
  const path = require('node:path');
  const out = path.join(process.env.INTERNALS_COUNT_DIR || '/tmp', `internals-count-${process.pid}.txt`);
  const from = Number(process.env.INTERNALS_COUNT_FROM || 1000);
  let requests = 0;
  let counting = false;
  const counts = new Map();
  // INTERNALS_COUNT_SITES=1: each count also keyed by its caller (the first frames outside node's own modules).
  const sites = process.env.INTERNALS_COUNT_SITES === '1';
  const siteOf = () => {
    const frames = (new Error().stack || '').split('\n').slice(3).filter((l) => !l.includes('node:') && !l.includes('internals-count'));
    return frames.slice(0, 2).map((l) => l.trim().replace(/^at /, '').replace(/\(?\/.*\/(dist|node_modules)\//, '(')).join(' < ');
  };
  const bump = (k) => { if (counting) { if (sites) k = `${k} @ ${siteOf()}`; counts.set(k, (counts.get(k) || 0) + 1); } };
  const nameOf = (o) => (o && o.constructor && o.constructor.name) || '?';
  const EE = events.EventEmitter.prototype;
  const emit = EE.emit;
  EE.emit = function countedEmit(ev, ...a) { bump(`emit ${nameOf(this)} ${String(ev)}`); return emit.call(this, ev, ...a); };
  for (const m of ['on', 'addListener', 'once', 'prependListener', 'prependOnceListener']) {
    const f = EE[m];
    EE[m] = function countedAdd(ev, fn) { bump(`listen(${m}) ${nameOf(this)} ${String(ev)}`); return f.call(this, ev, fn); };
  }
  const wrapGlobal = (obj, name) => { const f = obj[name]; obj[name] = function counted(...a) { bump(name); return f.apply(this, a); }; };
  wrapGlobal(globalThis, 'setTimeout');
  wrapGlobal(globalThis, 'setImmediate');
  wrapGlobal(globalThis, 'queueMicrotask');
  wrapGlobal(timers, 'setTimeout');
  const nt = process.nextTick;
  process.nextTick = function countedTick(...a) { bump('process.nextTick'); return nt.apply(process, a); };
  const ch = crypto.createHash;
  crypto.createHash = function countedCreateHash(alg, ...a) { bump(`createHash ${alg}`); return ch.call(crypto, alg, ...a); };
  if (crypto.hash) { const h = crypto.hash; crypto.hash = function countedHash(alg, ...a) { bump(`hash ${alg}`); return h.call(crypto, alg, ...a); }; }
  const hm = crypto.createHmac;
  crypto.createHmac = function countedHmac(alg, ...a) { bump(`createHmac ${alg}`); return hm.call(crypto, alg, ...a); };
  const sEmit = http.Server.prototype.emit;
  http.Server.prototype.emit = function countingServerEmit(event, ...args) {
    if (event === 'request') {
      requests++;
      if (requests === from) { counting = true; counts.clear(); }
      if (counting && requests % 500 === 0) {
        const n = requests - from;
        const lines = [...counts].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${(v / n).toFixed(2).padStart(8)}  ${k}`);
        fs.writeFileSync(out, `${process.cwd()} requests ${n}\n${lines.join('\n')}\n`);
      }
    }
    return sEmit.call(this, event, ...args);
  };
}
