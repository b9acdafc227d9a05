/**
 * Tool maps: how the suite's roles map onto another server's tool names and argument names, so the
 * `mcp-stateless` and `sql-gateway` profiles can test an MCP SQL server whose catalogue is not
 * InterLock's. A tool map is a JSON file:
 *
 *   {
 *     "tools":     { "list": "list_tables", "query": "execute_sql", "describe": "describe_table" },
 *     "arguments": { "query": { "sql": "sql", "source_id": null } },
 *     "fixed":     { "query": { "database": "main" } }
 *   }
 *
 * - `tools.list`: a tool that succeeds when called with `{}` (the suite's probe of a successful call).
 * - `tools.query`: the tool that runs SQL (the `sql-gateway` profile sends every payload through it).
 * - `tools.describe`: optional; a tool that describes a source.
 * - `arguments.<role>.<suite name>`: the server's argument name for each argument the suite sends
 *   (`sql`, `source_id`, `params`); `null` means the server's tool has no such argument and it is left out.
 * - `fixed.<role>`: arguments sent as they are with every call of that role.
 */
import * as fs from 'node:fs';

/** The roles the suite knows. */
export type ToolRole = 'list' | 'query' | 'describe';

/** A loaded tool map (see the module comment for the file format). */
export interface ToolMap {
  tools: Partial<Record<ToolRole, string>>;
  arguments: Partial<Record<ToolRole, Record<string, string | null>>>;
  fixed: Partial<Record<ToolRole, Record<string, unknown>>>;
}

/** InterLock's own tool shape: what the suite assumes when no tool map is given. */
export const INTERLOCK_TOOL_MAP: ToolMap = {
  tools: { list: 'interlock_list_sources', query: 'interlock_query', describe: 'interlock_describe_source' },
  arguments: { query: { sql: 'sql', source_id: 'source_id', params: 'params' } },
  fixed: {},
};

const ROLES: ToolRole[] = ['list', 'query', 'describe'];
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Validates a parsed tool map; throws with the offending member named. */
export function parseToolMap(value: unknown): ToolMap {
  if (!isObj(value)) throw new Error('tool map: the file must hold a JSON object');
  for (const k of Object.keys(value)) if (!['tools', 'arguments', 'fixed'].includes(k)) throw new Error(`tool map: unknown member "${k}"`);
  const out: ToolMap = { tools: {}, arguments: {}, fixed: {} };
  const tools = value.tools ?? {};
  if (!isObj(tools)) throw new Error('tool map: "tools" must be an object');
  for (const [role, name] of Object.entries(tools)) {
    if (!ROLES.includes(role as ToolRole)) throw new Error(`tool map: unknown role "${role}" (roles: ${ROLES.join(', ')})`);
    if (typeof name !== 'string' || name === '') throw new Error(`tool map: tools.${role} must be a tool name`);
    out.tools[role as ToolRole] = name;
  }
  for (const member of ['arguments', 'fixed'] as const) {
    const m = value[member] ?? {};
    if (!isObj(m)) throw new Error(`tool map: "${member}" must be an object`);
    for (const [role, v] of Object.entries(m)) {
      if (!ROLES.includes(role as ToolRole)) throw new Error(`tool map: ${member}.${role}: unknown role`);
      if (!isObj(v)) throw new Error(`tool map: ${member}.${role} must be an object`);
      if (member === 'arguments') {
        for (const [k, name] of Object.entries(v)) if (name !== null && typeof name !== 'string') throw new Error(`tool map: arguments.${role}.${k} must be a string or null`);
        out.arguments[role as ToolRole] = v as Record<string, string | null>;
      } else out.fixed[role as ToolRole] = v;
    }
  }
  return out;
}

/** Reads and validates a tool map file. Throws with the path when it cannot be read or parsed. */
export function loadToolMap(file: string): ToolMap {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`tool map: cannot read ${file}: ${(e as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`tool map: ${file} is not JSON: ${(e as Error).message}`);
  }
  return parseToolMap(value);
}

/**
 * Builds the `arguments` of a call of `role` from the suite's own argument names: each is renamed as
 * the map says (dropped when mapped to null), then the role's fixed arguments are added.
 */
export function mapArguments(map: ToolMap, role: ToolRole, args: Record<string, unknown>): Record<string, unknown> {
  const names = map.arguments[role] ?? {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(args)) {
    if (v === undefined) continue;
    const target = k in names ? names[k] : k;
    if (target === null || target === undefined) continue;
    out[target] = v;
  }
  return { ...out, ...(map.fixed[role] ?? {}) };
}
