/**
 * `interlock source scan` warns when a source has row rules but no writer role to create its row
 * views (task hnu42b item 1): every read, search and document of a ruled table is then refused
 * row_rules_unavailable, which the operator should learn at scan time, not from agents.
 */
import { rowRulesWithoutWriterWarning } from '../../../src/cli/source';
import type { SourceRoleRecord } from '../../../src/control/roles';
import type { PolicyRecord } from '../../../src/control/policies';

const ruled = { name: 'regional', statements: [{ effect: 'allow', action: 'read', resource: 'public.notes', rows: 'region = identity.region' }] } as unknown as SourceRoleRecord;
const plain = { name: 'reader', statements: [{ effect: 'allow', action: 'read', resource: '*' }] } as unknown as SourceRoleRecord;
const restrict = (name: string, sources?: string[], enabled = true) => ({ name, enabled, applies_to: sources ? { sources } : {}, rule: { type: 'restrict_rows', relations: ['public.notes'], rows: 'region = identity.region' } }) as unknown as PolicyRecord;
const src = (writer?: string) => ({ id: 'hr', type: 'postgres', settings: { host: 'h', ...(writer ? { writer: { user: writer } } : {}) } });

test('no writer role and a granted role with rows: the warning names the role and the way out', () => {
  expect(rowRulesWithoutWriterWarning(src(), [ruled, plain], [])).toBe(
    "warning: source hr has row rules (role(s) regional) but no writer role to create its row views: agents' reads, searches and documents of the ruled tables are refused (row_rules_unavailable) until it has one: interlock source update hr --writer-user <role> --writer-password-env <var> (docs/row-rules.md)",
  );
});

test('a restrict_rows policy for the source counts; one for another source or disabled does not', () => {
  expect(rowRulesWithoutWriterWarning(src(), [plain], [restrict('own-region', ['hr'])])).toContain('(policy(ies) own-region)');
  expect(rowRulesWithoutWriterWarning(src(), [plain], [restrict('everywhere')])).toContain('(policy(ies) everywhere)');
  expect(rowRulesWithoutWriterWarning(src(), [plain], [restrict('elsewhere', ['crm']), restrict('off', ['hr'], false)])).toBeNull();
});

test('no warning with a writer role, without row rules, or for a documents source', () => {
  expect(rowRulesWithoutWriterWarning(src('w'), [ruled], [restrict('own-region', ['hr'])])).toBeNull();
  expect(rowRulesWithoutWriterWarning(src(), [plain], [])).toBeNull();
  expect(rowRulesWithoutWriterWarning({ id: 'hb', type: 'documents', settings: { path: '/x' } }, [ruled], [])).toBeNull();
});
