/**
 * oper.ts — operators (PostgreSQL: parse_oper.c): each operator use is judged by the operator
 * PostgreSQL resolves for its operand types (../operators.ts), or by name when the catalogue lacks
 * the operator rows; a volatile implementation is refused, a stable non-built-in one makes the
 * result uncacheable.
 */
import type { OperatorForm, UserOperator } from '../operators';
import { type N, q, Refusal, strings } from './nodes';
import type { WalkState } from './state';
import { functionRead } from './uses';

/**
 * A user operator may run: the function implementing it is recorded with what it reads (task hfn).
 * `left`/`right` undefined: every operator of that schema and name (judged by name only).
 */
function userOperatorRead(st: WalkState, op: { schema: string; name: string; left?: number; right?: number }): void {
  const shown = op.schema + '.' + op.name;
  const code = st.cat.source.operatorCode;
  if (!code) return functionRead(st, op.schema, op.name, shown, 'is an operator whose implementing function the catalogue does not record (rescan the source)');
  let found = false;
  for (const [s, n, l, r, fs, fn] of code) {
    if (s !== op.schema || n !== op.name || (op.left !== undefined && (l !== op.left || r !== op.right))) continue;
    found = true;
    if (fs === null || fn === null) functionRead(st, op.schema, op.name, shown, 'is an operator without an implementing function');
    else if (fs !== 'pg_catalog' && fs !== 'information_schema') functionRead(st, fs, fn, shown);
  }
  if (!found) functionRead(st, op.schema, op.name, shown, 'is an operator whose implementing function the catalogue does not record (rescan the source)');
}

/** An operator judged by name only: every candidate on the path must be non-volatile (used without operator resolution). */
export function checkOperator(st: WalkState, nameList: N[] | undefined): void {
  const parts = strings(nameList, 'operator name');
  if (parts.length === 0 || parts.length > 2) throw new Refusal('function_not_allowed', 'malformed operator name');
  const ops = st.cat.operatorsByName;
  if (!ops) return;
  const name = parts[parts.length - 1];
  const schema = parts.length === 2 ? parts[0] : undefined;
  if (schema === undefined) st.operatorNames.add(name);
  else if (schema !== 'pg_catalog') st.qualifiedOperatorNames.set(schema + '\u0000' + name, { schema, name });
  const all = ops.get(name);
  let found = false;
  if (all) {
    for (const r of all) {
      if (schema !== undefined ? r.schema !== schema : !st.cat.path.includes(r.schema)) continue;
      found = true;
      if (r.volatility === 'volatile') throw new Refusal('function_not_allowed', `operator ${q(name)} is implemented by a volatile function`);
      if (r.volatility === 'stable' && r.schema !== 'pg_catalog') st.cacheable = false;
      if (r.schema !== 'pg_catalog') {
        st.userOperator = true;
        userOperatorRead(st, { schema: r.schema, name: r.name });
      }
    }
  }
  if (!found) throw new Refusal('function_not_allowed', `unknown operator ${q(schema !== undefined ? schema + '.' + name : name)}`);
}

/** Judges one operator use by the operator PostgreSQL resolves (operators.ts); refuses when it cannot be proven safe. */
export function operatorUse(st: WalkState, form: OperatorForm): void {
  const d = st.ops!.use(form);
  if (d.refusal !== null) throw new Refusal('function_not_allowed', d.refusal);
  for (const n of d.names) {
    if (n.schema === null) st.operatorNames.add(n.name);
    else st.qualifiedOperatorNames.set(n.schema + '\u0000' + n.name, { schema: n.schema, name: n.name });
  }
  // The resolver marks a use not cacheable exactly when an operator outside pg_catalog may run.
  if (!d.cacheable) {
    st.cacheable = false;
    st.userOperator = true;
  }
  for (const u of d.user as ReadonlyArray<UserOperator>) userOperatorRead(st, u);
}

/** `ORDER BY x USING op` (statements, windows, aggregates); call after `x` was walked. */
export function sortOperator(st: WalkState, sb: N): void {
  if (!sb.useOp) return;
  if (st.ops) operatorUse(st, { kind: 'sort', useOp: sb.useOp, node: sb.node });
  else checkOperator(st, sb.useOp);
}

/** True when every candidate for this operator name is a `pg_catalog` one (false without an operator list). */
export function builtInOperator(st: WalkState, nameList: N[] | undefined): boolean {
  const parts = strings(nameList, 'operator name');
  if (parts.length === 2) return parts[0] === 'pg_catalog';
  const all = st.cat.operatorsByName?.get(parts[0]);
  return !!all && all.every((r) => r.schema === 'pg_catalog' || !st.cat.path.includes(r.schema));
}
