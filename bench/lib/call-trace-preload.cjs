/**
 * Per-call timeline of a compiled gateway (issue 29, h29x: where the slowest calls spend their time).
 * Loaded with `node -r` before bin/interlock.js by bench/call-trace.ts; patches the compiled modules of
 * CALL_TRACE_ROOT (dist/) and node:http, and records nothing until SIGUSR2. The first SIGUSR2 starts
 * a window, the second ends it and writes CALL_TRACE_OUT (JSON, times in ms of performance.now()):
 *  - calls: per X-Request-Id [arrive ('request' event), admit (X-Request-Id set), readStart
 *    (connector.read), hold (the identity's source slot held), readEnd, submit (audit record()),
 *    taken (its batch taken by a lane), settle (record() settled), end (res.end)];
 *  - batches: [write started, write settled, events, append started (after normalising and hashing),
 *    append settled (its pool checkout, statement and commit)];
 *  - gc: [start, duration, kind]; lags: [time, lag] of a 5 ms interval timer fired ≥ 2 ms late;
 *  - eld: monitorEventLoopDelay's p50 / p99 / max over the window (ms).
 * A call maps to its source read by its CallAbort (created synchronously after X-Request-Id is set).
 * A bench instrument only: never loaded by the product.
 */
'use strict';
const http = require('node:http');
const path = require('node:path');
const fs = require('node:fs');
const { performance, PerformanceObserver, monitorEventLoopDelay } = require('node:perf_hooks');

const root = process.env.CALL_TRACE_ROOT;
const out = process.env.CALL_TRACE_OUT;
const dist = (p) => require(path.join(root, 'dist', 'src', p));

let on = false;
let calls = new Map();
let batches = [];
let gcs = [];
let lags = [];
const eld = monitorEventLoopDelay({ resolution: 1 });
const now = () => performance.now();
const rec = (rid) => {
  let c = calls.get(rid);
  if (!c) calls.set(rid, (c = {}));
  return c;
};

// HTTP: arrival, request id, end.
const emit = http.Server.prototype.emit;
http.Server.prototype.emit = function (ev, req, res) {
  if (on && ev === 'request' && res) res.__arrive = now();
  return emit.apply(this, arguments);
};
let lastRid = null;
const setHeader = http.ServerResponse.prototype.setHeader;
http.ServerResponse.prototype.setHeader = function (name, value) {
  if (on && name === 'X-Request-Id') {
    this.__rid = value;
    lastRid = value;
    const c = rec(value);
    c.arrive = this.__arrive;
    c.admit = now();
  }
  return setHeader.apply(this, arguments);
};
const end = http.ServerResponse.prototype.end;
http.ServerResponse.prototype.end = function () {
  if (on && this.__rid) {
    const c = calls.get(this.__rid);
    if (c) {
      c.end = now();
      c.status = this.statusCode;
    }
  }
  return end.apply(this, arguments);
};

// The call's CallAbort carries its request id to the source read.
const abortMod = dist('transport/call-abort.js');
const Base = abortMod.CallAbort;
class TracedAbort extends Base {
  constructor() {
    super();
    this.__rid = on ? lastRid : null;
  }
}
abortMod.CallAbort = TracedAbort;

const conn = dist('sources/postgres/connector.js').PostgresSourceConnector.prototype;
const read = conn.read;
conn.read = function (sql, params, opts) {
  const rid = on && opts && opts.signal ? opts.signal.__rid : null;
  if (!rid) return read.apply(this, arguments);
  const c = rec(rid);
  c.readStart = now();
  if (opts) opts.__rid = rid;
  const p = read.apply(this, arguments);
  return p.then((v) => ((c.readEnd = now()), v), (e) => ((c.readEnd = now()), Promise.reject(e)));
};
const holding = conn.holding;
conn.holding = function (release, sql, values, opts) {
  if (on && opts && opts.__rid) rec(opts.__rid).hold = now();
  return holding.apply(this, arguments);
};

// The audit writer: submit, taken into a batch, settled; and each batch's append.
const sink = dist('audit/writer.js').GroupCommitAuditSink.prototype;
const record = sink.record;
sink.record = function (event) {
  const rid = on && event ? event.requestId : null;
  const p = record.apply(this, arguments);
  if (!rid) return p;
  const c = rec(rid);
  c.submit = now();
  return p.then((v) => ((c.settle = now()), v), (e) => ((c.settle = now()), Promise.reject(e)));
};
const run = sink.run;
sink.run = function (lane, taken) {
  if (on) {
    const t = now();
    for (const w of taken) if (w.event && w.event.requestId) rec(w.event.requestId).taken = t;
  }
  return run.apply(this, arguments);
};
const write = sink.write;
let current = null;
sink.write = function (lane, batch) {
  if (!on) return write.apply(this, arguments);
  const b = [now(), 0, batch.length, 0, 0, 0];
  batches.push(b);
  for (const w of batch) if (w.event && w.event.requestId) rec(w.event.requestId).batch = batches.length - 1;
  current = b;
  const p = write.apply(this, arguments);
  current = null;
  return p.finally(() => (b[1] = now()));
};
// The append's round trip (pool checkout, statement, commit) inside a batch: [.., sent, returned, connected].
const appendMod = dist('audit/append.js');
const appendBatch = appendMod.appendAuditBatch;
appendMod.appendAuditBatch = function () {
  const b = current;
  if (!b) return appendBatch.apply(this, arguments);
  b[3] = now();
  return appendBatch.apply(this, arguments).finally(() => (b[4] = now()));
};

// GC pauses and event-loop lag.
new PerformanceObserver((list) => {
  if (!on) return;
  for (const e of list.getEntries()) gcs.push([e.startTime, e.duration, e.detail ? e.detail.kind : e.kind]);
}).observe({ entryTypes: ['gc'] });
let tick = now();
setInterval(() => {
  const t = now();
  if (on && t - tick - 5 >= 2) lags.push([t, t - tick - 5]);
  tick = t;
}, 5).unref();

process.on('SIGUSR2', () => {
  if (!on) {
    calls = new Map();
    batches = [];
    gcs = [];
    lags = [];
    eld.reset();
    eld.enable();
    on = true;
    return;
  }
  on = false;
  eld.disable();
  const q = (p) => eld.percentile(p) / 1e6;
  const data = { calls: [...calls.entries()].map(([rid, c]) => ({ rid, ...c })), batches, gc: gcs, lags, eld: { p50: q(50), p99: q(99), max: eld.max / 1e6 } };
  fs.writeFileSync(out + '.tmp', JSON.stringify(data));
  fs.renameSync(out + '.tmp', out);
});
