/**
 * Policies (spec/policy-v1.schema.json): declarative rules that can refuse or restrict what a role
 * allows, never allow. Contract: Governance And Errors.
 */
import {
  validatePolicy,
  validatePolicyDenyRelations,
  validatePolicyHideDocuments,
  validatePolicyMaskColumns,
  validatePolicyMaxRows,
  validatePolicyRequireWhere,
  validatePolicyRestrictRows,
  validatePolicyTimeWindow,
  type Validator,
} from '../../generated/validators';
import type { Policy } from '../../generated/policy-v1';
import type pg from 'pg';
import { isUniqueViolation, withTransaction, type ControlDb } from './db';
import { recordChange, type ChangeActor } from './change-audit';
import { ConflictError, formatSchemaErrors, ValidationError } from './errors';
import { iso } from './ids';
import { initSqlParser } from '../sql/analyze';
import { parseRowPredicate, RowPredicateError } from '../sql/row-rules/predicate';
import { loadKnownSources, refuseUnknownPolicyNames } from './catalog-names';

export type { Policy } from '../../generated/policy-v1';

/** A stored policy: the validated Policy with `enabled` resolved, plus timestamps. */
export type PolicyRecord = Policy & { enabled: boolean; description: string; createdAt: string; updatedAt: string };

interface PolicyRow {
  name: string;
  description: string;
  enabled: boolean;
  applies_to: NonNullable<Policy['applies_to']>;
  rule: Policy['rule'];
  created_at: Date;
  updated_at: Date;
}

const COLS = 'name, description, enabled, applies_to, rule, created_at, updated_at';

function toRecord(r: PolicyRow): PolicyRecord {
  const rec: PolicyRecord = { name: r.name, description: r.description, enabled: r.enabled, rule: r.rule, createdAt: iso(r.created_at)!, updatedAt: iso(r.updated_at)! };
  if (Object.keys(r.applies_to).length > 0) rec.applies_to = r.applies_to;
  return rec;
}

/** The validator of each rule type (the schema's oneOf branches), for precise error paths. */
const RULE_VALIDATORS: Record<string, Validator> = {
  deny_relations: validatePolicyDenyRelations,
  require_where: validatePolicyRequireWhere,
  max_rows: validatePolicyMaxRows,
  time_window: validatePolicyTimeWindow,
  mask_columns: validatePolicyMaskColumns,
  hide_documents: validatePolicyHideDocuments,
  restrict_rows: validatePolicyRestrictRows,
};

/** "path: message" lines for one invalid policy: the rule is checked against its own type's branch only. */
function policyErrors(p: unknown, root: string): string[] {
  const lines = formatSchemaErrors(validatePolicy.errors, root).filter((l) => !l.startsWith(`${root}/rule`));
  const rule = (p as { rule?: unknown } | null)?.rule;
  if (rule === undefined) return lines;
  const type = (rule as { type?: unknown } | null)?.type;
  const v = typeof type === 'string' ? RULE_VALIDATORS[type] : undefined;
  if (!v) {
    lines.push(`${root}/rule/type: must be one of ${Object.keys(RULE_VALIDATORS).join(', ')}`);
  } else if (!v(rule)) {
    lines.push(...formatSchemaErrors(v.errors, `${root}/rule`));
  }
  return lines;
}

/**
 * The schema errors of one policy as "root/path: message" lines, each rule checked against its own
 * type's branch only ([] when valid): e.g. `/policies/0/rule/max_rows: must be >= 1` rather than
 * one line per rule type it is not.
 */
export function policySchemaErrors(p: unknown, root: string): string[] {
  return validatePolicy(p) ? [] : policyErrors(p, root);
}

/**
 * Validates one policy or a list of policies (parsed JSON/YAML) against spec/policy-v1.schema.json.
 * Throws ValidationError ("[1]/rule/type: …" for the second item of a list), or for duplicate names.
 */
export function parsePolicies(input: unknown): Policy[] {
  const items = Array.isArray(input) ? input : [input];
  if (items.length === 0) throw new ValidationError('the policy file holds an empty list');
  const details: string[] = [];
  items.forEach((p, i) => {
    if (!validatePolicy(p)) details.push(...policyErrors(p, Array.isArray(input) ? `[${i}]` : ''));
  });
  if (details.length) throw new ValidationError(Array.isArray(input) ? 'invalid policy list' : 'invalid policy', details);
  const names = (items as Policy[]).map((p) => p.name);
  const dup = names.find((n, i) => names.indexOf(n) !== i);
  if (dup) throw new ValidationError(`policy "${dup}" appears twice in the file`);
  return items as Policy[];
}

/**
 * Checks the `rows` predicate of each `restrict_rows` policy (issue 27) with the SQL parser, in the
 * grammar of a role allow's `rows` (src/sql/row-rules/predicate.ts), and that each of its relations
 * is `schema.table` or `*` (wildcards allowed). Returns "<name>/rule/…: what is wrong" lines
 * (empty when all are valid). Loads the parser.
 */
export async function policyRowRuleErrors(policies: Policy[]): Promise<string[]> {
  const restricting = policies.filter((p) => p.rule.type === 'restrict_rows');
  if (restricting.length === 0) return [];
  await initSqlParser();
  const out: string[] = [];
  for (const p of restricting) {
    const rule = p.rule as Extract<Policy['rule'], { type: 'restrict_rows' }>;
    rule.relations.forEach((r, i) => {
      if (r !== '*' && r.split('.').length !== 2) out.push(`${p.name}/rule/relations/${i}: a row restriction names schema.table relations (got ${r})`);
    });
    try {
      parseRowPredicate(rule.rows);
    } catch (err) {
      if (!(err instanceof RowPredicateError)) throw err;
      out.push(`${p.name}/rule/rows: ${err.message}`);
    }
  }
  return out;
}

/** Throws ValidationError("invalid policy", details) when policyRowRuleErrors finds any. */
export async function checkPolicyRowRules(policies: Policy[]): Promise<void> {
  const errors = await policyRowRuleErrors(policies);
  if (errors.length) throw new ValidationError('invalid policy: a row restriction is not valid', errors);
}

/**
 * Adds policies (one or a list, validated first, `restrict_rows` predicates too) in one transaction. With `replace`, existing
 * policies of the same names are replaced; otherwise an existing name is a ConflictError and
 * nothing is written. Returns the stored policies with whether each was new. Records policy_added or
 * policy_updated ({policy}) per policy that changed, in the same transaction. A policy naming a
 * source that is not registered, or a relation or column that no scanned catalogue of its sources
 * holds, is a ValidationError ("did you mean" when one is close) unless `allowUnknownNames` (the
 * latter only; src/control/catalog-names.ts, task hnu4a item 1).
 */
export async function addPolicies(db: ControlDb, input: unknown, opts: { replace?: boolean; allowUnknownNames?: boolean } = {}, actor: ChangeActor = {}): Promise<Array<{ policy: PolicyRecord; created: boolean }>> {
  const policies = parsePolicies(input);
  await checkPolicyRowRules(policies);
  refuseUnknownPolicyNames(await loadKnownSources(db), policies, opts.allowUnknownNames);
  return withTransaction(db, async (c) => {
    const out: Array<{ policy: PolicyRecord; created: boolean }> = [];
    for (const p of policies) {
      const params = [p.name, p.description ?? '', p.enabled ?? true, JSON.stringify(p.applies_to ?? {}), JSON.stringify(p.rule)];
      try {
        const r = await c.query<PolicyRow & { inserted: boolean }>(
          opts.replace
            ? `INSERT INTO policies (name, description, enabled, applies_to, rule) VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description, enabled = EXCLUDED.enabled,
                 applies_to = EXCLUDED.applies_to, rule = EXCLUDED.rule, updated_at = now()
               WHERE (policies.description, policies.enabled, policies.applies_to, policies.rule)
                 IS DISTINCT FROM (EXCLUDED.description, EXCLUDED.enabled, EXCLUDED.applies_to, EXCLUDED.rule)
               RETURNING ${COLS}, (xmax = 0) AS inserted`
            : `INSERT INTO policies (name, description, enabled, applies_to, rule) VALUES ($1, $2, $3, $4, $5) RETURNING ${COLS}, true AS inserted`,
          params,
        );
        if (!r.rows[0]) {
          // Replaced by the same definition: nothing changed, nothing recorded.
          const same = await c.query<PolicyRow>(`SELECT ${COLS} FROM policies WHERE name = $1`, [p.name]);
          out.push({ policy: toRecord(same.rows[0]), created: false });
          continue;
        }
        await recordChange(c, actor, r.rows[0].inserted ? 'policy_added' : 'policy_updated', { policy: p.name });
        out.push({ policy: toRecord(r.rows[0]), created: r.rows[0].inserted });
      } catch (err) {
        if (isUniqueViolation(err)) throw new ConflictError(`policy "${p.name}" already exists (use --replace to replace it)`);
        throw err;
      }
    }
    return out;
  });
}

/** Adds one policy (see addPolicies). Throws ValidationError or ConflictError. */
export async function addPolicy(db: ControlDb, policy: unknown, opts: { replace?: boolean; allowUnknownNames?: boolean } = {}, actor: ChangeActor = {}): Promise<{ policy: PolicyRecord; created: boolean }> {
  if (Array.isArray(policy)) throw new ValidationError('addPolicy takes one policy; use addPolicies for a list');
  return (await addPolicies(db, policy, opts, actor))[0];
}

/** Every policy (enabled or not), by name. */
export async function listPolicies(db: ControlDb): Promise<PolicyRecord[]> {
  const r = await db.pool.query<PolicyRow>(`SELECT ${COLS} FROM policies ORDER BY name`);
  return r.rows.map(toRecord);
}

/** The policy called `name`, or null. */
export async function getPolicy(db: ControlDb, name: string): Promise<PolicyRecord | null> {
  const r = await db.pool.query<PolicyRow>(`SELECT ${COLS} FROM policies WHERE name = $1`, [name]);
  return r.rows[0] ? toRecord(r.rows[0]) : null;
}

/** Removes the policy and records policy_removed ({policy}) in the same transaction. Returns false when there was none of that name. */
export async function removePolicy(db: ControlDb, name: string, actor: ChangeActor = {}): Promise<boolean> {
  return withTransaction(db, async (c) => {
    const r = await c.query('DELETE FROM policies WHERE name = $1', [name]);
    if (r.rowCount !== 1) return false;
    await recordChange(c, actor, 'policy_removed', { policy: name });
    return true;
  });
}

/** What untiePolicies did: the policies removed (they named only the value) and those that no longer name it, by name. */
export interface PolicyUntying {
  removed: string[];
  detached: string[];
}

/**
 * The policies whose `applies_to[list]` names `value` (a source id or a role name being removed),
 * inside the caller's transaction (trial nu40: such policies outlived what they named, broke
 * export → apply, and were inherited by a later object of the same name). Without `force`: a
 * ConflictError naming them (details: their names) when there is one. With `force`: what ties each
 * to `value` goes, as a removed source's or role's grants do: a policy whose list names only
 * `value` is removed (it could never apply again; an empty list would apply to nothing), one naming
 * others too no longer names it; each recorded (policy_removed / policy_updated, reason
 * `${kind}_removed`) with `opts.sourceId` as the event's source when given.
 */
export async function untiePolicies(
  c: pg.ClientBase,
  list: 'sources' | 'roles',
  value: string,
  opts: { operator: string; force?: boolean; what: string; sourceId?: string },
): Promise<PolicyUntying> {
  const r = await c.query<{ name: string; names: string[] }>(
    `SELECT name, ARRAY(SELECT jsonb_array_elements_text(applies_to->$1::text)) AS names FROM policies
     WHERE jsonb_typeof(applies_to->$1::text) = 'array' AND applies_to->$1::text ? $2 ORDER BY name FOR UPDATE`,
    [list, value],
  );
  const naming = r.rows;
  const out: PolicyUntying = { removed: [], detached: [] };
  if (naming.length === 0) return out;
  if (!opts.force) {
    throw new ConflictError(
      `${opts.what} is named in applies_to.${list} by ${naming.length} policy(ies): ${naming.map((p) => p.name).join(', ')}; change or remove them first, or force the removal (a policy naming only "${value}" is then removed, the others no longer name it)`,
      naming.map((p) => p.name),
    );
  }
  const reason = list === 'sources' ? 'source_removed' : 'role_removed';
  const actor: ChangeActor = { operator: opts.operator };
  for (const p of naming) {
    const rest = p.names.filter((n) => n !== value);
    if (rest.length === 0) {
      await c.query('DELETE FROM policies WHERE name = $1', [p.name]);
      await recordChange(c, actor, 'policy_removed', { policy: p.name, reason }, opts.sourceId ?? null);
      out.removed.push(p.name);
    } else {
      await c.query(`UPDATE policies SET applies_to = jsonb_set(applies_to, ARRAY[$2::text], $3::jsonb), updated_at = now() WHERE name = $1`, [p.name, list, JSON.stringify(rest)]);
      await recordChange(c, actor, 'policy_updated', { policy: p.name, reason, changed: [`applies_to.${list}`] }, opts.sourceId ?? null);
      out.detached.push(p.name);
    }
  }
  return out;
}

/** The enabled policies, by name, as the evaluator consumes them (Policy shape, enabled: true). */
export async function activePolicies(db: ControlDb): Promise<Policy[]> {
  const r = await db.pool.query<PolicyRow>(`SELECT ${COLS} FROM policies WHERE enabled ORDER BY name`);
  return r.rows.map((row) => {
    const p: Policy = { name: row.name, enabled: true, rule: row.rule };
    if (row.description) p.description = row.description;
    if (Object.keys(row.applies_to).length > 0) p.applies_to = row.applies_to;
    return p;
  });
}
