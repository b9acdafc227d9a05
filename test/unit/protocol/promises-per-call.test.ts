/**
 * Promises per governed tools/call on the dispatcher's own path (issue 28 item 3): dispatch →
 * callTool → runToolCall → runAdmitted → handler → audit → answer, with an in-memory identity
 * resolver, handler and audit sink, counted exactly with an async_hooks PROMISE hook. The path
 * has no async wrappers around dispatch, callTool or runToolCall (each was an async function plus an
 * await, where one `then` does). The bound is this count: a change that adds promises per call fails here.
 */
import { createHook } from 'node:async_hooks';
import { dispatch, InflightRegistry, type DispatchDeps } from '../../../src/protocol/dispatch';
import { ToolRegistry, interlockToolBindings } from '../../../src/tools/registry';
import { MemoryAuditSink } from '../../../src/audit/types';
import { StaticIdentityResolver } from '../../../src/pipeline/01-identity';
import { listSourcesHandler, StaticSourceDirectory } from '../../../src/tools/handlers/list-sources';
import { createLogger } from '../../../src/observability/logger';
import type { Admitted } from '../../../src/transport/admission';
import type { ResponseChannel } from '../../../src/transport/channel';

const KEY = 'ilk_test_promises_0123456789abcdefghijklm';

function deps(audit: MemoryAuditSink): DispatchDeps {
  return {
    tools: new ToolRegistry(interlockToolBindings({ interlock_list_sources: listSourcesHandler(new StaticSourceDirectory([{ id: 'demo', name: 'Demo', type: 'postgres', active: true, grantees: ['id-p'] }])) })),
    identityResolver: new StaticIdentityResolver({ [KEY]: { id: 'id-p', name: 'p' } }),
    audit,
    logger: createLogger('silent'),
    inflight: new InflightRegistry(),
    pendingAudits: new Set(),
  };
}

/** A channel that records the final answer. */
function channel(): ResponseChannel & { answers: unknown[] } {
  const answers: unknown[] = [];
  return { answers, closed: false, isStreaming: false, final: (_s: number, m: unknown) => answers.push(m), whenDone: (fn: () => void) => fn(), writeDeadline: () => undefined, event: () => undefined } as unknown as ResponseChannel & { answers: unknown[] };
}

const CALL: Admitted = {
  kind: 'admitted',
  dialect: 'modern',
  version: '2026-07-28',
  message: { type: 'request', id: 7, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } },
} as unknown as Admitted;

async function promisesOfOneCall(d: DispatchDeps): Promise<{ promises: number; answers: unknown[] }> {
  const ch = channel();
  let promises = 0;
  const hook = createHook({
    init(_id, type) {
      if (type === 'PROMISE') promises++;
    },
  });
  const signal = new AbortController().signal;
  hook.enable();
  try {
    await dispatch(CALL, { requestId: 'req_promises', apiKey: KEY, signal, abort: () => undefined }, ch, d);
  } finally {
    hook.disable();
  }
  return { promises, answers: ch.answers };
}

test('a governed tools/call answers after its event is recorded, within the promise count of the path without async wrappers', async () => {
  const audit = new MemoryAuditSink();
  const d = deps(audit);
  await promisesOfOneCall(d); // warm: first-call allocations (module state, caches)
  const { promises, answers } = await promisesOfOneCall(d);
  expect(audit.events).toHaveLength(2);
  expect(audit.events[1]).toMatchObject({ requestId: 'req_promises', tool: 'interlock_list_sources', decision: 'allowed', identityId: 'id-p' });
  expect(answers).toHaveLength(1);
  expect((answers[0] as { id: unknown; result?: unknown }).id).toBe(7);
  expect((answers[0] as { result?: unknown }).result).toBeDefined();
  expect(promises).toBeLessThanOrEqual(MAX_PROMISES);
});

/**
 * Measured (Node 20): 11 with step 1 answered synchronously for a key the resolver holds (resolveNow,
 * h28j); 15 with an async step 1 and resolve; 20 with async dispatch, callTool and runToolCall.
 */
const MAX_PROMISES = 11;
