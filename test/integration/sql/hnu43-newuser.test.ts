/**
 * Task hnu43: what a new user (nu43) found driving InterLock from the README, on real PostgreSQL
 * (the row-rule fixture, test/helpers/row-rules.ts, plus an `ssn` column, stored generated columns
 * over denied, masked and plain columns, and a SQL function reading one column of a ruled table):
 *  1. the describe tools decide a stored generated column through its inputs, as a read does, and
 *     never show a generation expression naming a column the caller may not read unmasked; a
 *     `deny read` column a write allow covers is described `write_only`;
 *  3. TABLESAMPLE on a row-ruled table is refused before execution with a reason (not 0A000);
 *  4. a function's refusal says the body's columns are not known instead of "reads column ssn";
 *  5. the masked-column refusal says what happens: count(col) answers the mask, max(col) is refused.
 */
import { startRowFixture, rowsOf, codeOf, type RowFixture } from '../../helpers/row-rules';
import type { SourceRole } from '../../../src/control/roles';
import { describeAccessHandler, describeSourceHandler } from '../../../src/tools/handlers/describe';
import { memoryRateLimiter } from '../../../src/pipeline/05-rate-limit';
import type { ToolCallContext, ToolOutcome } from '../../../src/tools/types';

const EXTRA = `
ALTER TABLE customer ADD COLUMN ssn text, ADD COLUMN phone text;
UPDATE customer SET ssn = lpad(customer_id::text, 9, '0'), phone = '+49 30 ' || customer_id;
ALTER TABLE customer ADD COLUMN ssn_tail text GENERATED ALWAYS AS (right(ssn, 4)) STORED,
  ADD COLUMN email_len int GENERATED ALWAYS AS (length(email)) STORED,
  ADD COLUMN country_lc text GENERATED ALWAYS AS (lower(country)) STORED;
CREATE FUNCTION cust_email(id int) RETURNS text LANGUAGE sql STABLE AS 'SELECT email FROM customer WHERE customer_id = id';
`;

const NU: SourceRole = {
  name: 'nu',
  statements: [
    { effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' },
    { effect: 'allow', action: 'read', resource: 'public.invoice' },
    { effect: 'deny', action: 'read', resource: 'public.customer.ssn' },
    { effect: 'allow', action: 'describe', resource: 'public.*' },
  ],
};
const NUW: SourceRole = { name: 'nuw', statements: [...NU.statements, { effect: 'allow', action: 'write', resource: 'public.customer' }] };
/** nuw with a read deny on a generated column itself: it cannot be written either. */
const NUG: SourceRole = { name: 'nug', statements: [...NUW.statements, { effect: 'deny', action: 'read', resource: 'public.customer.country_lc' }] };
const A = { employee_id: 1 };

let fx: RowFixture;
beforeAll(async () => {
  fx = await startRowFixture(EXTRA);
  fx.grant('nu', [NU]);
  fx.grant('nuw', [NUW]);
  fx.grant('nug', [NUG]);
  fx.store.policies = [
    { name: 'mask-email', rule: { type: 'mask_columns', columns: ['public.customer.email'], method: 'partial' } },
    { name: 'mask-phone', rule: { type: 'mask_columns', columns: ['public.customer.phone'], method: 'partial' } },
  ];
}, 60_000);
afterAll(async () => fx?.close());

const deps = () => ({ store: fx.store, rateLimiter: memoryRateLimiter({ perIdentity: { points: 1e6, windowSeconds: 60 }, perSource: { points: 1e6, windowSeconds: 60 } }), catalog: async () => fx.catalog });
const ctx = (id: string) => ({ requestId: 'req_hnu43', apiKey: null, identity: { id, name: id, keyId: 'k', attributes: A }, dialect: 'modern', protocolVersion: '2025-11-25', signal: new AbortController().signal, auditDetails: {} }) as unknown as ToolCallContext;
const structured = (o: ToolOutcome) => (o.kind === 'result' ? (o.structuredContent as Record<string, any>) : (() => { throw new Error(JSON.stringify(o)); })());
const refusal = (o: ToolOutcome) => (o.kind === 'refusal' ? { code: o.code, message: o.message } : o);

async function customerAccess(id: string) {
  const out = structured(await describeAccessHandler(deps())({ source_id: 'rows' }, ctx(id)));
  const t = out.rows.resources.tables.find((x: { table: string }) => x.table === 'public.customer');
  return { columns: t.columns, masked_columns: t.masked_columns };
}
async function customerSource(id: string) {
  const out = structured(await describeSourceHandler(deps())({ source_id: 'rows' }, ctx(id)));
  return Object.fromEntries(
    out.rows
      .filter((r: { table_name: string }) => r.table_name === 'customer')
      .map((r: { column_name: string; column_default: string | null; is_generated: boolean; write_only?: boolean }) => [r.column_name, { default: r.column_default, generated: r.is_generated, ...(r.write_only ? { write_only: true } : {}) }]),
  );
}

describe('item 1: the describe tools follow a generated column inputs, as reads do', () => {
  it('reads: ssn_tail refused with ssn, email_len masked with email, country_lc plain', async () => {
    expect(codeOf(await fx.call('nu', A, 'SELECT ssn_tail FROM customer'))).toBe('source_role_denied');
    expect(rowsOf(await fx.call('nu', A, 'SELECT email_len, country_lc FROM customer WHERE customer_id = 6'))).toEqual([{ email_len: '***', country_lc: 'jp' }]);
  });

  it('describe_access lists no generated column over a denied input, and one over a masked input as masked', async () => {
    // Before: columns held ssn_tail, masked_columns only [email, phone].
    expect(await customerAccess('nu')).toEqual({
      columns: ['customer_id', 'support_rep_id', 'country', 'email', 'credit', 'code', 'phone', 'email_len', 'country_lc'],
      masked_columns: ['email', 'phone', 'email_len'],
    });
  });

  it('describe_source hides ssn_tail and the expression over a masked input; a plain one keeps its expression', async () => {
    // Before: ssn_tail listed with column_default "right(ssn, 4)", email_len with "length(email)".
    const rows = await customerSource('nu');
    expect(Object.keys(rows)).toEqual(['customer_id', 'support_rep_id', 'country', 'email', 'credit', 'code', 'phone', 'email_len', 'country_lc']);
    expect(rows.email_len).toEqual({ default: null, generated: true });
    expect(rows.country_lc).toEqual({ default: 'lower(country)', generated: true });
  });

  it('with a write allow: ssn is listed write_only, ssn_tail still hidden', async () => {
    // Before: ssn listed as any other column, ssn_tail with "right(ssn, 4)".
    const rows = await customerSource('nuw');
    expect(Object.keys(rows)).toEqual(['customer_id', 'support_rep_id', 'country', 'email', 'credit', 'code', 'ssn', 'phone', 'email_len', 'country_lc']);
    expect(rows.ssn).toEqual({ default: null, generated: false, write_only: true });
    expect(Object.values(rows).filter((r) => (r as { write_only?: boolean }).write_only)).toHaveLength(1);
    // A generated column whose own read is denied is not listed write_only (it cannot be written): not at all.
    expect(Object.keys(await customerSource('nug'))).toEqual(['customer_id', 'support_rep_id', 'country', 'email', 'credit', 'code', 'ssn', 'phone', 'email_len']);
    // describe_access (reads) is unchanged by the write allow.
    expect((await customerAccess('nuw')).columns).not.toContain('ssn');
  });
});

describe('item 3: TABLESAMPLE on a row-ruled table', () => {
  it('is refused row_rule_unenforceable with the reason; an unruled table still samples', async () => {
    // Before: statement_failed (0A000 from PostgreSQL, no explanation).
    expect(refusal(await fx.call('nu', A, 'SELECT count(*) FROM customer TABLESAMPLE SYSTEM (100)'))).toEqual({
      code: 'row_rule_unenforceable',
      message:
        'TABLESAMPLE on "customer", a table with a row rule for this identity: a row rule reads the table through a view, which PostgreSQL cannot sample. Remove TABLESAMPLE (filter or LIMIT the rows instead); tables without a row rule for you can still be sampled.',
    });
    expect(rowsOf(await fx.call('nu', A, 'SELECT count(*)::int AS n FROM invoice TABLESAMPLE SYSTEM (100)'))).toEqual([{ n: 240 }]);
    expect(rowsOf(await fx.call('nu', A, 'SELECT count(*)::int AS n FROM customer'))).toEqual([{ n: 8 }]);
  });
});

describe('item 4: a function whose body reads one column of a table with a denied column', () => {
  it('names the table and says the body columns are not known', async () => {
    const tail = "A function's result cannot be masked or checked column by column, so the call is refused. Read the columns you may use directly (interlock_describe_access lists them), or ask an operator.";
    // ssn is hidden from nu (deny read, describe by wildcard only): the table is named, not the column.
    // Before: "The function public.cust_email reads a relation or column that …" (no cause).
    expect(refusal(await fx.call('nu', A, 'SELECT cust_email(6)'))).toEqual({
      code: 'source_role_denied',
      message: `The function public.cust_email reads table public.customer. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and a column of it is one no source role granted to this identity allows reading. ${tail}`,
    });
    // nuw may describe ssn (write_only). Before: "The function public.cust_email reads column public.customer.ssn, which no source role …".
    expect(refusal(await fx.call('nuw', A, 'SELECT cust_email(6)'))).toEqual({
      code: 'source_role_denied',
      message:
        "The function public.cust_email reads table public.customer. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and no source role granted to this identity allows reading column public.customer.ssn (the body need not use it). A function's result cannot be masked or checked column by column, so the call is refused. Read the columns you may use directly (interlock_describe_access lists them), or ask an operator.",
    });
  });
});

describe('item 5: aggregates of a masked column', () => {
  it('max(email) is refused with a text saying so; count(phone) answers the mask', async () => {
    // Before: "… an aggregate of it (count(email) too) returns the mask …" although max is refused.
    expect(refusal(await fx.call('nu', A, 'SELECT max(email) FROM customer'))).toEqual({
      code: 'policy_denied',
      message:
        'Column public.customer.email is masked by policy: it can only be selected as it is, not used in conditions, expressions, joins, grouping, ordering, set operations, aggregates other than count, or writes; count(email) returns the mask instead of a number, and count(*) counts rows.',
    });
    expect(rowsOf(await fx.call('nu', A, 'SELECT count(phone) AS n FROM customer'))).toEqual([{ n: '***' }]);
  });
});
