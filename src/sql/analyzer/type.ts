/**
 * type.ts — type names (PostgreSQL: parse_type.c): the policy on types named in casts, column
 * definition lists and JSON outputs (refused and unsafe types, resource-sized modifiers), their
 * resolution against the catalogue, and a relation's row type used as a type.
 */
import { typeModifierReason } from '../builtin-functions/sizing';
import { deniedTypeReason } from '../function-policy';
import { relKey } from '../prepared-catalog';
import { typeNameResolves } from '../type-names';
import { checkFields, hasOwn, type N, nodeType, q, Refusal, strings, strs } from './nodes';
import { SYSTEM_SCHEMAS } from './relation';
import type { WalkState } from './state';
import { codeOfTypeName } from '../type-code';
import { typeNameSchemas } from '../type-uses';
import { functionRead, readAll } from './uses';

/** A type name (`TypeName`): refused when denied, unsafe (runs user code), unknown or sized over the limits; a relation row type reads the relation. */
export function typeName(st: WalkState, t: N | undefined): void {
  if (!t) return;
  checkFields('TypeName', t);
  if (t.pct_type || t.setof) throw new Refusal('statement_not_allowed', 'unsupported type reference');
  const names = strings(t.names, 'type name');
  if (names.length > 2) throw new Refusal('statement_not_allowed', 'cross-database type references are not supported');
  const typeNameOnly = names[names.length - 1];
  if (names.length === 1 || names[0] === 'pg_catalog') {
    const why = deniedTypeReason(typeNameOnly);
    if (why) throw new Refusal('function_not_allowed', `type ${q(names.join('.'))} is not allowed: it ${why}`);
  }
  rowTypeUse(st, names);
  // A type that exists nowhere answers like a missing relation (issue 12, Build 4).
  if (!typeNameResolves(st.cat, names)) throw new Refusal('unknown_relation', `unknown type ${q(names.join('.'))}`);
  const unsafe = st.cat.unsafeTypes.get(names[names.length - 1]);
  if (unsafe) {
    const hit = names.length === 2 ? unsafe.includes(names[0]) : unsafe.some((sch) => st.cat.path.includes(sch));
    if (hit) throw new Refusal('function_not_allowed', `type ${q(names.join('.'))} runs user code (domain CHECK or input function) and cannot be used in a cast`);
  }
  // A cast to (or use of) a type runs its user casts and operator-class functions (task hcast).
  for (const f of codeOfTypeName(st.cat, names, st.cat.path)) functionRead(st, f.schema, f.name);
  // Its casts and domain constraints are found by oid: compared by the type guard (task hcast).
  if (st.guardsTypes) for (const s of typeNameSchemas(st.cat, names, st.cat.path, SYSTEM_SCHEMAS)) st.typeNames.set(s + '\u0000' + typeNameOnly, { schema: s, name: typeNameOnly });
  for (const m of t.typmods ?? []) {
    const mt = nodeType(m);
    if (mt !== 'A_Const' && mt !== 'ColumnRef') throw new Refusal('statement_not_allowed', 'unsupported type modifier');
    if (mt === 'A_Const') checkFields('A_Const', m.A_Const);
    else strs((m.ColumnRef as N).fields ?? []); // e.g. INTERVAL field names are constants
  }
  for (const b of t.arrayBounds ?? []) if (!hasOwn.call(b, 'Integer')) throw new Refusal('statement_not_allowed', 'unsupported array bound');
  const sized = names.length === 1 || names[0] === 'pg_catalog' ? typeModifierReason(typeNameOnly, t.typmods) : null;
  if (sized) throw new Refusal('function_not_allowed', `resource limit: ${sized}`);
}

/**
 * A relation's row type used as a type (`NULL::employee`, `CAST(x AS employee)`, `employee[]`,
 * a column definition list) reveals the relation's shape (`jsonb_populate_record(NULL::employee,
 * '{}')` lists every column): it counts as reading every column, so authorization refuses it to
 * callers who may not read the relation. Unqualified names are matched against every relation
 * of that name on the search path (over-approximation when a built-in type has the same name).
 */
function rowTypeUse(st: WalkState, names: string[]): void {
  const name = names[names.length - 1];
  if (names.length === 2) {
    if (SYSTEM_SCHEMAS.has(names[0])) return;
    const rel = st.cat.relations.get(relKey(names[0], name));
    if (rel) readAll(st, rel);
    return;
  }
  for (const sch of st.cat.path) {
    if (sch === 'pg_catalog') continue;
    const rel = st.cat.relations.get(relKey(sch, name));
    if (rel) readAll(st, rel);
  }
}
