/**
 * `audit search --decision` accepts only decisions the trail records (task hnu4b item c): the lists
 * of src/audit/types.ts, checked against every decision src/ records and against the admin API's
 * description of the `decision` filter.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { APPROVAL_ACTIONS, CONFIG_DECISIONS, TOOL_CALL_DECISIONS } from '../../../src/audit/types';
import { checkAuditDecision } from '../../../src/cli/main';
import { ValidationError } from '../../../src/control/errors';

const SRC = join(__dirname, '../../../src');
const files = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));

test('every configuration change src/ records, and every one the admin API documents, is a known decision', () => {
  const recorded = new Set<string>();
  // Configuration changes are recorded by the control plane, the admin tokens and apply.
  // …and `interlock audit retire-key` (src/audit/keyed-trail.ts, task low47).
  for (const f of [...['control', 'admin', 'declarative'].flatMap((d) => files(join(SRC, d))), join(SRC, 'audit', 'keyed-trail.ts')]) {
    const text = readFileSync(f, 'utf8');
    // recordChange(c, actor, 'key_created', …), recordChange(c, actor, enabled ? 'source_enabled' : 'source_disabled', …), recordGrantChange(c, actor, 'grant_added', …)
    for (const m of text.matchAll(/record(?:Grant)?Change\(c, actor, ([^{]*?)[,{]/g)) for (const l of m[1].matchAll(/'([a-z_]+)'/g)) recorded.add(l[1]);
    // { decision: 'source_updated', … } and CLAIM_RULES_SYNCED = 'claim_rules_synced'
    for (const l of text.matchAll(/(?:decision: |CLAIM_RULES_SYNCED = )'([a-z_]+)'/g)) recorded.add(l[1]);
  }
  expect(recorded.size).toBe(CONFIG_DECISIONS.length);
  expect([...recorded].filter((d) => !(CONFIG_DECISIONS as readonly string[]).includes(d))).toEqual([]);
  const openapi = readFileSync(join(__dirname, '../../../spec/openapi-v1.yaml'), 'utf8');
  const documented = /kind config: ([a-z_, ]+);/.exec(openapi.slice(openapi.indexOf('- { name: decision, in: query')))![1].split(', ');
  expect(documented).toEqual([...CONFIG_DECISIONS]);
});

test('a known decision of each kind passes; a typo is a validation error naming the nearest and every allowed value', () => {
  for (const d of [...TOOL_CALL_DECISIONS, ...APPROVAL_ACTIONS, ...CONFIG_DECISIONS]) expect(() => checkAuditDecision(d)).not.toThrow();
  let err: unknown;
  try {
    checkAuditDecision('refuzed');
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ValidationError);
  expect({ message: (err as ValidationError).message, details: (err as ValidationError).details }).toEqual({
    message: '--decision: unknown decision "refuzed" (did you mean refused?)',
    details: [
      'tool calls: allowed, refused, queued, invalid, failed, cancelled',
      'approvals: queued, approved, rejected, executed, failed, expired, refused, requeued',
      `configuration changes: ${CONFIG_DECISIONS.join(', ')}`,
    ],
  });
  expect(() => checkAuditDecision('zzzzzzzzzz')).toThrow('--decision: unknown decision "zzzzzzzzzz"');
});
