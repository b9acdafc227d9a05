/**
 * Profiles: every rule of the suite belongs to exactly one profile, so an implementer can run only
 * the rules that apply to their server.
 *
 * - `mcp-stateless`: the transport and JSON-RPC rules of the MCP revisions that apply to any stateless
 *   Streamable HTTP server (headers, dialect selection, version errors, batches, notifications, GET
 *   and DELETE, Origin and Host, SSE framing, result and error shapes). Alone or with other profiles it
 *   is judged in MCP mode on the server's own tool catalogue (read from its tools/list), not InterLock's,
 *   so it gives the same verdicts either way (trial nuc's finding 3).
 * - `interlock-v1`: InterLock's contract on top of MCP: the exact catalogue and its aliases, the
 *   `resultType`/`_meta` envelope, cache hints, governed refusals (AUTH), the request-scoped stream.
 * - `sql-gateway`: the governance pack (conformance/sql/): read-only escapes and masked-value leaks
 *   through a server's SQL tool, checked against the database's state.
 *
 * A failure is attributed only to the rule whose check found it (see run.ts), and a rule outside the
 * selected profiles is neither run nor reported.
 */

/** The profiles, in the order a report lists them. */
export const PROFILES = ['mcp-stateless', 'interlock-v1', 'sql-gateway'] as const;

/** One profile name. */
export type Profile = (typeof PROFILES)[number];

/** What a run selects when no --profile is given: the whole MCP V1 contract (SQL pack excluded: it needs a database). */
export const DEFAULT_PROFILES: Profile[] = ['mcp-stateless', 'interlock-v1'];

/**
 * Rule id → profile. Covers the `checks` ids of protocol-v1.json, the `results.*` keys, and the
 * cross-cutting shape rules the verdict reports on their own (`tools`, `capabilities`, `versions.*`).
 * The SQL pack's rules are `sql.<class>` ids (profile `sql-gateway`).
 */
const RULE_PROFILE: Record<string, Profile> = {
  HOST: 'mcp-stateless',
  ORIGIN: 'mcp-stateless',
  'HTTP-METHOD': 'mcp-stateless',
  'CONTENT-TYPE': 'mcp-stateless',
  ACCEPT: 'mcp-stateless',
  JSON: 'mcp-stateless',
  'NO-BATCH': 'mcp-stateless',
  'JSONRPC-SHAPE': 'mcp-stateless',
  'VERSION-HEADER': 'mcp-stateless',
  'POSTED-RESPONSE': 'mcp-stateless',
  ENVELOPE: 'mcp-stateless',
  'VERSION-MATCH': 'mcp-stateless',
  'MCP-METHOD': 'mcp-stateless',
  'MCP-NAME': 'mcp-stateless',
  'METHOD-KNOWN': 'mcp-stateless',
  'METHOD-KNOWN-HANDSHAKE': 'mcp-stateless',
  'TOOL-KNOWN': 'mcp-stateless',
  'CLIENT-CAPABILITY': 'mcp-stateless',
  'INITIALIZE-PARAMS': 'mcp-stateless',
  'TOOL-ARGUMENTS': 'mcp-stateless',
  'results.plain': 'mcp-stateless',
  'results.notification': 'mcp-stateless',
  'results.noSession': 'mcp-stateless',
  'results.noNextCursorNull': 'mcp-stateless',
  'versions.initializeFallback': 'mcp-stateless',
  AUTH: 'interlock-v1',
  'results.complete': 'interlock-v1',
  'results.cacheable': 'interlock-v1',
  'results.toolCallStream': 'interlock-v1',
  'versions.supported': 'interlock-v1',
  capabilities: 'interlock-v1',
  tools: 'interlock-v1',
  /**
   * Issue 30 item 2: an answer MCP and the RFCs permit but the contract does not (a 403 without a
   * JSON-RPC body, a byte order mark refused, a batch served, …). Charged here, never to the generic
   * rule the request was aimed at, so `mcp-stateless` gives the same verdicts alone as together.
   */
  'interlock.strict': 'interlock-v1',
};

/** The profile of `rule`. Throws for a rule no profile owns (a suite defect, caught by the suite's own tests). */
export function profileOf(rule: string): Profile {
  if (rule.startsWith('sql.')) return 'sql-gateway';
  const p = RULE_PROFILE[rule];
  if (!p) throw new Error(`conformance: rule ${rule} belongs to no profile`);
  return p;
}

/** Every non-SQL rule id the profiles know, for the suite's own completeness test. */
export function knownRules(): string[] {
  return Object.keys(RULE_PROFILE);
}

/** Parses a list of profile names; throws with the valid names for an unknown one. */
export function parseProfiles(names: string[] | undefined): Profile[] {
  if (!names || names.length === 0) return [...DEFAULT_PROFILES];
  const out: Profile[] = [];
  for (const n of names.flatMap((x) => x.split(','))) {
    const name = n.trim();
    if (!(PROFILES as readonly string[]).includes(name)) throw new Error(`unknown profile "${name}" (profiles: ${PROFILES.join(', ')})`);
    if (!out.includes(name as Profile)) out.push(name as Profile);
  }
  return out;
}
