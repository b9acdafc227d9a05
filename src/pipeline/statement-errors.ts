/**
 * The object a failed statement's error names, when the agent may be told it (spec/errors-v1.json
 * `statementSqlstates`; contract "Governance And Errors": no driver text reaches a client).
 *
 * PostgreSQL's message is operator text: it can carry values from the data (22P02 quotes the text
 * it could not read), names from a view's definition or a rewrite (`interlock_rows` views, the mask
 * projection), hosts and roles. None of it is passed on. Only for an SQLSTATE whose message names a
 * column, relation, function or operator (`objectNames`) is the name taken out of the English
 * message, and it is given to the agent only when every dot-separated part of it is an identifier
 * (or, for an operator, an operator) the agent's own statement contains, as the scanner reads it: a
 * name the agent wrote itself. A message in another language (lc_messages), or any other shape,
 * names nothing.
 */
import { scanSql } from '../sql/parser';

/** What a statement error names: its kind and the name as PostgreSQL reports it (identifiers folded as the server folds them). */
export interface StatementErrorObject {
  kind: 'column' | 'relation' | 'function' | 'operator';
  name: string;
}

const QUOTED = '"((?:[^"]|"")+)"';
const WORDS = '([A-Za-z_][A-Za-z0-9_$]*(?:\\.[A-Za-z_][A-Za-z0-9_$]*)+)';

/** English message shapes per kind; group 1 is the name. */
const SHAPES: Record<StatementErrorObject['kind'], RegExp[]> = {
  column: [
    new RegExp(`^column (?:reference )?${QUOTED}`),
    new RegExp(`^column ${WORDS} does not exist$`),
  ],
  relation: [new RegExp(`^relation ${QUOTED} does not exist$`), new RegExp(`^missing FROM-clause entry for table ${QUOTED}$`)],
  function: [/^function ([^(]+)\(.*\) (?:does not exist|is not unique)$/],
  operator: [/^operator (?:does not exist|is not unique): (.+)$/],
};

const OPERATOR = /^[+\-*/<>=~!@#%^&|`?]+$/;

/** The identifiers (folded: unquoted lower-cased, quoted as written) and operators of `sql`; null when it cannot be scanned. */
function agentWords(sql: string): { identifiers: Set<string>; operators: Set<string> } | null {
  let tokens;
  try {
    tokens = scanSql(sql);
  } catch {
    return null;
  }
  const identifiers = new Set<string>();
  const operators = new Set<string>();
  for (const t of tokens) {
    if (t.text.length > 1 && t.text.startsWith('"') && t.text.endsWith('"')) identifiers.add(t.text.slice(1, -1).replace(/""/g, '"'));
    else if (/^[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*$/.test(t.text)) identifiers.add(t.text.toLowerCase());
    else if (OPERATOR.test(t.text)) operators.add(t.text);
  }
  return { identifiers, operators };
}

/**
 * The object `serverMessage` (PostgreSQL's English message for an error of one of `kinds`) names,
 * when the agent's statement `sql` wrote that name itself; undefined otherwise. Pure but for the
 * scanner (src/sql/parser.ts, initialised by the analysis that ran before).
 */
export function statementErrorObject(kinds: readonly string[], serverMessage: unknown, sql: string): StatementErrorObject | undefined {
  if (kinds.length === 0 || typeof serverMessage !== 'string' || serverMessage.length > 2000) return undefined;
  let words: ReturnType<typeof agentWords> | undefined;
  for (const kind of kinds as Array<StatementErrorObject['kind']>) {
    for (const re of SHAPES[kind] ?? []) {
      const m = re.exec(serverMessage);
      if (!m) continue;
      words ??= agentWords(sql);
      if (!words) return undefined;
      if (kind === 'operator') {
        const op = m[1].split(/\s+/).find((w) => OPERATOR.test(w));
        return op && words.operators.has(op) ? { kind, name: op } : undefined;
      }
      const name = m[1].replace(/""/g, '"');
      const parts = name.split('.');
      return parts.every((p) => p.length > 0 && words!.identifiers.has(p)) ? { kind, name } : undefined;
    }
  }
  return undefined;
}
