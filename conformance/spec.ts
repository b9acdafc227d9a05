/**
 * Loads the machine-readable contract from a spec folder (protocol-v1.json, errors-v1.json,
 * mcp-tools-v1.json) at runtime. The conformance suite never imports InterLock's src/: everything it
 * expects is derived from these files, so another implementer can point it at their own copy with
 * `--spec DIR`.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

/** One entry of protocol-v1.json `methods`. */
export interface MethodEntry {
  method: string;
  kind: 'request' | 'notification';
  dialects: Array<'modern' | 'handshake'>;
  authentication: string;
  result: string;
  envelope: 'complete' | 'plain' | 'none';
}

/** One entry of protocol-v1.json `checks` (the ordered admission and dispatch rules). */
export interface CheckEntry {
  id: string;
  order: number;
  dialects: Array<'modern' | 'handshake'>;
  rule: string;
  http: number;
  code: number;
  id_in_error: 'null' | 'echo' | 'echo-when-valid';
  data?: string;
}

/** The parts of protocol-v1.json the suite reads. */
export interface ProtocolSpec {
  endpoint: string;
  versions: {
    supported: string[];
    modern: string[];
    handshake: string[];
    assumedWhenHeaderAbsent: string;
    initializeFallback: string;
    argumentErrorsAsToolResults: string[];
  };
  headers: Record<string, string>;
  meta: { protocolVersion: string; clientCapabilities: string; clientInfo: string; serverInfo: string };
  caching: Record<string, { ttlMs: number; cacheScope: 'public' | 'private' }>;
  methods: MethodEntry[];
  capabilities: Record<string, unknown>;
  http: {
    allowedMethods: string[];
    notAllowedStatus: number;
    acceptedStatus: number;
    requiredContentType: string;
    requiredAccept: string[];
    defaultAllowedHosts: string[];
  };
  checks: CheckEntry[];
  results: Record<string, string>;
  deviations: Array<{ id: string; mcp: string; interlock: string; why: string }>;
}

/** The parts of errors-v1.json the suite reads. */
export interface ErrorsSpec {
  jsonrpc: Array<{ code: number; name: string; http: Record<string, number | string> }>;
  statuses: Array<{ status: string; http: number; modernCode: number | null; isError: boolean }>;
  refusals: Array<{ code: string; status: string }>;
}

/** A JSON Schema object (kept loose on purpose: the suite only hands it to ajv or walks it). */
export type JsonSchema = { [k: string]: unknown };

/** One tool name of the catalogue (a stable tool or a deprecated alias) with its input schema. */
export interface CatalogueTool {
  name: string;
  canonical: string;
  governed: boolean;
  deprecated: boolean;
  /** The tool's inputSchema with `$defs` of mcp-tools-v1.json attached, so local `$ref`s resolve. */
  inputSchema: JsonSchema;
  /**
   * Client capabilities the tool requires in the modern dialect (rule CLIENT-CAPABILITY), read from an optional
   * `requiredClientCapabilities` member of the tool entry; no catalogue tool declares one today.
   */
  requiredClientCapabilities?: Record<string, unknown>;
}

/** Everything the suite knows about the contract. */
export interface Spec {
  dir: string;
  protocol: ProtocolSpec;
  errors: ErrorsSpec;
  tools: CatalogueTool[];
  /** Rule ids in `checks` order. */
  checkIds: string[];
  /**
   * Canonical name of the tool whose call with a valid key and `{}` arguments must succeed (its success
   * is predictable), or undefined when no tool is known to be safe to call that way. The contract's is
   * `interlock_list_sources`; a tool map's `list` role replaces it.
   */
  probeTool?: string;
  /** True when `tools` is the contract's catalogue (mcp-tools-v1.json), false when read from the server under test. */
  contractCatalogue: boolean;
}

/** The contract's probe tool: no required arguments, reads only the caller's own grants. */
export const CONTRACT_PROBE_TOOL = 'interlock_list_sources';

/**
 * Returns `spec` with the catalogue replaced by a server's own tools/list answer (every tool
 * ungoverned: a generic server's authentication is not the contract's), for the `mcp-stateless`
 * profile run alone. `probeTool` names the tool safe to call with `{}` (a tool map's `list` role).
 */
export function withServerCatalogue(spec: Spec, tools: Array<{ name: string; inputSchema?: JsonSchema }>, probeTool?: string): Spec {
  const catalogue: CatalogueTool[] = tools.map((t) => ({
    name: t.name,
    canonical: t.name,
    governed: false,
    deprecated: false,
    inputSchema: t.inputSchema && typeof t.inputSchema === 'object' ? t.inputSchema : { type: 'object' },
  }));
  return { ...spec, tools: catalogue, probeTool: probeTool && catalogue.some((t) => t.name === probeTool) ? probeTool : undefined, contractCatalogue: false };
}

/**
 * Default spec folder: `contract/` inside an installed package (dist/contract, copied from spec/ at
 * build time), else `spec/` beside `conformance/` in a source checkout.
 */
export const DEFAULT_SPEC_DIR = [path.resolve(__dirname, 'contract'), path.resolve(__dirname, '..', 'spec')].find((d) =>
  fs.existsSync(path.join(d, 'protocol-v1.json')),
) ?? path.resolve(__dirname, '..', 'spec');

function readJson(dir: string, file: string): unknown {
  const p = path.join(dir, file);
  try {
    return JSON.parse(fs.readFileSync(p, 'utf8')) as unknown;
  } catch (e) {
    throw new Error(`conformance: cannot read ${p}: ${(e as Error).message}`);
  }
}

/**
 * Reads and cross-checks the three spec files in `dir`.
 * Throws with the file name when a file is missing or lacks a field the suite depends on.
 */
export function loadSpec(dir: string = DEFAULT_SPEC_DIR): Spec {
  const protocol = readJson(dir, 'protocol-v1.json') as ProtocolSpec;
  const errors = readJson(dir, 'errors-v1.json') as ErrorsSpec;
  const toolsDoc = readJson(dir, 'mcp-tools-v1.json') as {
    tools: Array<{ name: string; governed?: boolean; inputSchema: JsonSchema; requiredClientCapabilities?: Record<string, unknown> }>;
    aliases?: Array<{ name: string; successor: string }>;
    $defs?: JsonSchema;
  };
  for (const key of ['versions', 'headers', 'meta', 'methods', 'http', 'checks', 'results'] as const) {
    if (!(key in protocol)) throw new Error(`conformance: protocol-v1.json has no "${key}"`);
  }
  const defs = toolsDoc.$defs ?? {};
  const tools: CatalogueTool[] = toolsDoc.tools.map((t) => ({
    name: t.name,
    canonical: t.name,
    governed: t.governed !== false,
    deprecated: false,
    inputSchema: { ...t.inputSchema, $defs: defs },
    ...(t.requiredClientCapabilities ? { requiredClientCapabilities: t.requiredClientCapabilities } : {}),
  }));
  for (const a of toolsDoc.aliases ?? []) {
    const succ = tools.find((t) => t.name === a.successor);
    if (!succ) throw new Error(`conformance: alias ${a.name} names unknown successor ${a.successor}`);
    tools.push({ ...succ, name: a.name, deprecated: true });
  }
  const checkIds = [...protocol.checks].sort((a, b) => a.order - b.order).map((c) => c.id);
  const probeTool = tools.some((t) => t.name === CONTRACT_PROBE_TOOL) ? CONTRACT_PROBE_TOOL : undefined;
  return { dir, protocol, errors, tools, checkIds, probeTool, contractCatalogue: true };
}

/** Returns the check entry with rule id `id`; throws when the spec has no such rule. */
export function checkById(spec: Spec, id: string): CheckEntry {
  const c = spec.protocol.checks.find((x) => x.id === id);
  if (!c) throw new Error(`conformance: protocol-v1.json has no check ${id}`);
  return c;
}
