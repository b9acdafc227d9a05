/**
 * Discovery end to end (issue 4, "Done when"): real MCP clients — SDK v1 (handshake dialect) and
 * SDK v2 in legacy and auto (modern, 2026-07-28) modes — discover in the demo handbook through the
 * governed gateway, follow related documents and read a document with get_document, while the
 * handbook's audiences keep security and HR documents out of the demo agent's view; and a mapped
 * Chinook table whose body is the masked customer e-mail shows it masked exactly as interlock_query
 * does, and a search for the e-mail itself confirms nothing (issue 12).
 *
 * Needs the gateway wiring of src/gateway.ts: interlock_discover → discoverHandler,
 * interlock_related_documents → relatedDocumentsHandler, and queryHandler's connectorRequest →
 * documentsConnectorRequest. The handbook is provisioned here too (provisionHandbook is idempotent,
 * so this also works when the demo provisioning already did it).
 */
import { startGovernedEnv, callTool, type GovernedEnv } from '../helpers/governed';
import { connectSdkV1, connectSdkV2, type CallOutcome, type ConnectedClient } from '../helpers/clients';
import { provisionHandbook } from '../../src/discovery/handbook';
import { indexSource } from '../../src/discovery/indexer';
import { getSource, putSource } from '../../src/control/sources';
import { upsertRole } from '../../src/control/roles';
import { grantRole } from '../../src/control/grants';

const FAILOVER = 'handbook:operations/runbooks/database-failover.md';
const BACKUP_DRILL = 'handbook:operations/runbooks/backup-restore-drill.md';
const SECURITY_ONLY = 'handbook:security/incidents/INC-2025-023-phishing.md';
const CROSS_LINKING = 'handbook:support/tickets/TCK-1042.json';

let env: GovernedEnv;

beforeAll(async () => {
  env = await startGovernedEnv();
  await provisionHandbook(env.db, { identityId: env.demo.identityId });
  // The gateway's governance cache learns about the new source and grant through NOTIFY; wait for it.
  for (let i = 0; i < 50; i++) {
    const r = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
    if (r.body.result?.structuredContent?.handbook) break;
    await new Promise((res) => setTimeout(res, 100));
  }
}, 120_000);
afterAll(async () => {
  await env?.close();
});

function json(outcome: CallOutcome, label: string): Record<string, any> {
  if (outcome.kind !== 'result') throw new Error(`${label}: ${outcome.name}: ${outcome.message}`);
  if (outcome.result.isError) throw new Error(`${label}: tool error ${JSON.stringify(outcome.result.structuredContent)}`);
  const text = (outcome.result.content as Array<{ type: string; text?: string }>).find((c) => c.type === 'text')?.text;
  return JSON.parse(text as string);
}

/** The refusal code, whatever the dialect: structuredContent (handshake) or the JSON-RPC error data (modern). */
function refusalCode(outcome: CallOutcome): string | undefined {
  if (outcome.kind === 'result') return outcome.result.isError ? (outcome.result.structuredContent?.code as string) : undefined;
  const data = outcome.data as { text?: string; code?: string } | undefined;
  if (data?.text) return JSON.parse(data.text).error?.data?.code;
  return data?.code ?? (outcome.message.match(/unknown_asset|source_role_denied|unknown_source/)?.[0] ?? undefined);
}

const clients: Array<{ label: string; connect: () => Promise<ConnectedClient> }> = [
  { label: 'SDK v1 (2025-11-25)', connect: () => connectSdkV1({ url: env.url, apiKey: env.apiKey }) },
  { label: 'SDK v2 legacy', connect: () => connectSdkV2({ url: env.url, apiKey: env.apiKey, mode: 'legacy' }) },
  { label: 'SDK v2 auto (2026-07-28)', connect: () => connectSdkV2({ url: env.url, apiKey: env.apiKey, mode: 'auto' }) },
];

describe.each(clients)('$label', ({ connect }) => {
  let client: ConnectedClient;
  beforeAll(async () => {
    client = await connect();
  });
  afterAll(async () => {
    await client?.close();
  });

  test('the handbook is listed and both discovery tools are offered', async () => {
    expect(await client.listToolNames()).toEqual(expect.arrayContaining(['interlock_discover', 'interlock_related_documents']));
    const sources = json(await client.callTool('interlock_list_sources', {}), 'list_sources');
    expect(sources.handbook).toMatchObject({ type: 'documents' });
  });

  test('discover: ranked hits with highlighted snippets, all from the handbook', async () => {
    const r = json(await client.callTool('interlock_discover', { source_id: 'handbook', query: 'database failover' }), 'discover');
    const ids = r.hits.map((h: { asset_id: string }) => h.asset_id);
    expect(ids).toContain(FAILOVER);
    for (const h of r.hits) {
      expect(h.source_id).toBe('handbook');
      expect(h.expansion).toBe(false);
      expect(typeof h.score).toBe('number');
    }
    expect(r.hits.some((h: { snippet: string }) => h.snippet.includes('<b>'))).toBe(true);
    const filtered = json(await client.callTool('interlock_discover', { source_id: 'handbook', query: 'failover', document_types: ['runbook'], category_path: ['operations', 'runbooks'], limit: 3 }), 'discover filtered');
    expect(filtered.hits.length).toBeGreaterThan(0);
    expect(filtered.hits.length).toBeLessThanOrEqual(3);
    for (const h of filtered.hits) expect(h).toMatchObject({ document_type: 'runbook', category_path: ['operations', 'runbooks'] });
  });

  test('audiences: the demo agent (staff) never sees security or HR documents', async () => {
    for (const query of ['phishing campaign', 'salary bands', 'credential leak partner key', 'performance review calibration']) {
      const r = json(await client.callTool('interlock_discover', { source_id: 'handbook', query }), `discover ${query}`);
      expect(r).toEqual({ hits: [], truncated: false });
    }
  });

  test('expand_related adds related documents of the same source, marked as expansions', async () => {
    const r = json(await client.callTool('interlock_discover', { source_id: 'handbook', query: 'failover', expand_related: true, limit: 10 }), 'discover expand');
    expect(r.hits.length).toBeLessThanOrEqual(10);
    const exp = r.hits.filter((h: { expansion: boolean }) => h.expansion);
    expect(exp.length).toBeGreaterThan(0);
    for (const h of exp) expect(h).toMatchObject({ source_id: 'handbook', related_to: expect.stringMatching(/^handbook:/) });
  });

  test('follows related documents from a hit; never across sources, even when links point there', async () => {
    const r = json(await client.callTool('interlock_related_documents', { asset_id: FAILOVER }), 'related');
    expect(r).toMatchObject({ asset_id: FAILOVER, source_id: 'handbook' });
    expect(r.related).toEqual(expect.arrayContaining([expect.objectContaining({ asset_id: BACKUP_DRILL, relation: 'link' })]));
    for (const x of r.related) expect(x.asset_id.startsWith('handbook:')).toBe(true);
    const t = json(await client.callTool('interlock_related_documents', { asset_id: CROSS_LINKING, limit: 50 }), 'related cross');
    for (const x of t.related) expect(x.asset_id.startsWith('handbook:')).toBe(true);
  });

  test('reads a hit in full with get_document; links to other sources are left out', async () => {
    const d = json(await client.callTool('interlock_query', { source_id: 'handbook', request: { operation: 'get_document', asset_id: CROSS_LINKING } }), 'get_document');
    expect(d).toMatchObject({ asset_id: CROSS_LINKING, source_id: 'handbook', document_type: 'ticket' });
    expect(d.body).toContain('refund');
    expect(d.links).toEqual(['handbook:product/docs/billing-plans.json']);
  });

  test('an asset outside the audience answers exactly like a missing one; chinook has no discover', async () => {
    const hidden = await client.callTool('interlock_related_documents', { asset_id: SECURITY_ONLY });
    const missing = await client.callTool('interlock_related_documents', { asset_id: 'handbook:no/such/document.md' });
    expect(refusalCode(hidden)).toBe('unknown_asset');
    expect(refusalCode(missing)).toBe('unknown_asset');
    if (hidden.kind === 'result' && missing.kind === 'result') expect(hidden.result.structuredContent?.message).toBe(missing.result.structuredContent?.message);
    expect(refusalCode(await client.callTool('interlock_discover', { source_id: 'chinook', query: 'invoice' }))).toBe('source_role_denied');
  });
});

test('every discovery call is audited with source, action and row count', async () => {
  await new Promise((res) => setTimeout(res, 300)); // audit events are written after each response
  const r = await env.db.pool.query<{ canonical_tool: string; decision: string; source_id: string | null; action: string | null; row_count: string | null; reason_code: string | null }>(
    "SELECT canonical_tool, decision, source_id, action, row_count, reason_code FROM audit_events WHERE canonical_tool IN ('interlock_discover', 'interlock_related_documents') ORDER BY id",
  );
  expect(r.rows.length).toBeGreaterThan(20);
  for (const e of r.rows) expect(e.action).toBe('discover');
  const allowed = r.rows.filter((e) => e.decision === 'allowed');
  expect(allowed.length).toBeGreaterThan(10);
  for (const e of allowed) {
    expect(e.source_id).toBe('handbook');
    expect(e.row_count).not.toBeNull();
  }
  expect(r.rows.filter((e) => e.reason_code === 'unknown_asset').length).toBeGreaterThan(0);
});

describe('a mapped Chinook table follows interlock_query decisions (issue 12)', () => {
  // public.customer mapped to documents: title last_name, body email (masked `partial` by the demo
  // policy), category country. Discover on chinook is granted here, after the tests above.
  const CUSTOMER = 'chinook:public.customer/1';
  let client: ConnectedClient;
  let email: string;
  let maskedEmail: string;
  let lastName: string;

  beforeAll(async () => {
    const src = await getSource(env.db, 'chinook');
    const mapping = { table: 'public.customer', id_column: 'customer_id', title_column: 'last_name', body_column: 'email', category_column: 'country' };
    await putSource(env.db, { id: 'chinook', type: 'postgres', name: src!.name, settings: { ...src!.settings, document_tables: [mapping] } });
    await indexSource(env.db, 'chinook');
    await upsertRole(env.db, { name: 'demo-discover-chinook', statements: [{ effect: 'allow', action: 'discover', resource: '*' }] });
    await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'demo-discover-chinook', sourceId: 'chinook' });
    const row = (await env.db.pool.query<{ title: string; body: string }>('SELECT title, body FROM assets WHERE asset_id = $1', [CUSTOMER])).rows[0];
    lastName = row.title;
    email = row.body;
    client = await connectSdkV1({ url: env.url, apiKey: env.apiKey });
    for (let i = 0; i < 50; i++) {
      const r = await client.callTool('interlock_discover', { source_id: 'chinook', query: lastName });
      if (refusalCode(r) !== 'source_role_denied') break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const q = json(await client.callTool('interlock_query', { source_id: 'chinook', sql: 'SELECT email FROM customer WHERE customer_id = 1' }), 'query');
    maskedEmail = (Array.isArray(q) ? q : q.rows)[0].email;
  }, 60_000);
  afterAll(async () => {
    await client?.close();
  });

  test('the masked e-mail is shown exactly as interlock_query masks it, and searching it confirms nothing', async () => {
    expect(maskedEmail).not.toBe(email);
    expect(maskedEmail).toMatch(/^\S\*\*\*@\*\*\*\.\w+$|^\*\*\*/);
    const byName = json(await client.callTool('interlock_discover', { source_id: 'chinook', query: lastName, limit: 50 }), 'discover name');
    const hit = byName.hits.find((h: { asset_id: string }) => h.asset_id === CUSTOMER);
    expect(hit).toMatchObject({ title: lastName, snippet: maskedEmail, source_id: 'chinook' });
    expect(JSON.stringify(byName)).not.toContain(email);
    const byEmail = json(await client.callTool('interlock_discover', { source_id: 'chinook', query: email }), 'discover email');
    expect(byEmail).toEqual({ hits: [], truncated: false });
  });
});
