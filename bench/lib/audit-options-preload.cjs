/**
 * Bench only (issue 29, h29x): runs a compiled gateway of this checkout with other audit writer
 * options than src/gateway.ts gives, without a config key — loaded with `node -r` before
 * bin/interlock.js (e.g. `AFTER_FLAGS="-r bench/lib/audit-options-preload.cjs"` for bench/frontier-ab.ts,
 * or BENCH_GATEWAY_NODE_FLAGS for bench/call-trace.ts). BENCH_AUDIT_OPTIONS is a JSON object of
 * GroupCommitOptions merged over the gateway's (src/audit/writer.ts: `lanes`, `overlapAfterMs` ('auto'
 * or ms), `laneStartEvents`, `maxBatch`), e.g. `{"lanes":3,"overlapAfterMs":0}`. It replaces the
 * compiled module's GroupCommitAuditSink export with a subclass, which src/gateway.ts's compiled code
 * looks up when it builds the writer. The audit pool stays at openAuditPool's 2 connections, so
 * `lanes` above 2 wait for a connection (a third lane needs the pool's `max` raised as well). Checked
 * at 04:58 (load 9): `{"lanes":3,"overlapAfterMs":0}` took the batches of a 3 s run at 32 connections
 * from 120 (median 6 events) to 496 (median 2). Never loaded by the product.
 */
'use strict';
const path = require('node:path');

const writer = require(path.resolve(__dirname, '..', '..', 'dist', 'src', 'audit', 'writer.js'));
const extra = JSON.parse(process.env.BENCH_AUDIT_OPTIONS || '{}');
const Base = writer.GroupCommitAuditSink;
writer.GroupCommitAuditSink = class extends Base {
  constructor(pool, logger, opts) {
    super(pool, logger, { ...(opts || {}), ...extra });
  }
};
process.stderr.write(`audit-options-preload: ${JSON.stringify(extra)}\n`);
