/**
 * The tool registry: binds the catalogue generated from spec/mcp-tools-v1.json (generated/
 * tool-catalogue.json) to handlers. tools/list serves exactly the generated catalogue, so editing a
 * description in spec/ and regenerating changes what clients see with no other edit.
 */
import catalogue from '../../generated/tool-catalogue.json';
import * as validators from '../../generated/validators';
import type { ToolBinding, ToolHandler } from './types';
import { inexactParamMessage } from '../pipeline/json-numbers';

/** Handlers by canonical tool name (interlock_*); aliases reuse their successor's handler. */
export type ToolHandlers = Partial<Record<string, ToolHandler>>;

/** The served tools with O(1) lookup by name. */
export class ToolRegistry {
  private readonly byName = new Map<string, ToolBinding>();
  constructor(readonly bindings: ToolBinding[]) {
    for (const b of bindings) {
      if (this.byName.has(b.name)) throw new Error(`duplicate tool ${b.name}`);
      this.byName.set(b.name, b);
    }
  }
  /** The binding for `name`, or undefined for an unknown tool (→ -32602). */
  get(name: string): ToolBinding | undefined {
    return this.byName.get(name);
  }
  /** tools/list entries: name, title, description, inputSchema, in catalogue order. */
  list(): Array<Record<string, unknown>> {
    return this.bindings.map((b) => {
      const t: Record<string, unknown> = { name: b.name, description: b.description, inputSchema: b.inputSchema };
      if (b.title) t.title = b.title;
      return t;
    });
  }
}

function pascal(name: string): string {
  return name
    .split(/[_\-\s]+/)
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join('');
}

/** Most values of an enum an agent-facing validation message lists (the rest: ", … (N more)"). */
const MAX_LISTED_VALUES = 20;

/** The values of a schema enum as a comma-separated list of their JSON forms, at most MAX_LISTED_VALUES. */
function allowedList(values: unknown[]): string {
  const shown = values.slice(0, MAX_LISTED_VALUES).map((v) => JSON.stringify(v)).join(', ');
  return values.length > MAX_LISTED_VALUES ? `${shown}, … (${values.length - MAX_LISTED_VALUES} more)` : shown;
}

/**
 * What an agent reads after a `source_id` that fails the SourceId pattern of spec/mcp-tools-v1.json
 * (a new user's agent sent "Chinook": task nu48fix item 2b): what ids look like and where to find them.
 */
const NOT_A_SOURCE_ID = 'source ids are lower case (letters, digits, _ and -); call interlock_list_sources for the ids you may use';

/**
 * Formats ajv errors as one short sentence for an agent (at most 5 errors, `; `-separated): the
 * argument's path (`arguments` for the object itself) and what is wrong; an unknown property is
 * named (`arguments has an unknown property "source_id"`), so the agent knows what to drop; a value
 * outside an enum names the schema's allowed values (`source_types.0 must be one of: "postgres", …`);
 * a `source_id` failing its pattern says what ids look like and that interlock_list_sources lists
 * them (NOT_A_SOURCE_ID), quoting the value (up to 64 characters) when `args`, the validated
 * arguments, are given; a `params` item that is a number the schema refuses (JSON's 1e400, read as
 * ±Infinity) gets interlock_query's hint to send it as a string (`inexactParamMessage`, red team
 * rt48d R7), as a rounded number does.
 */
export function describeValidationErrors(errors: Array<{ instancePath?: string; message?: string; keyword?: string; params?: Record<string, unknown> }> | null | undefined, args?: unknown): string {
  if (!errors || errors.length === 0) return 'arguments do not match the input schema';
  return errors
    .slice(0, 5)
    .map((e) => {
      const at = e.instancePath ? e.instancePath.slice(1).replace(/\//g, '.') : 'arguments';
      if (e.keyword === 'additionalProperties' && typeof e.params?.additionalProperty === 'string') return `${at} has an unknown property ${JSON.stringify(e.params.additionalProperty)}`;
      if (e.keyword === 'pattern' && e.instancePath === '/source_id') {
        const given = (args as { source_id?: unknown } | null | undefined)?.source_id;
        // Quoted when short (an id is at most 63 characters): a long value is not echoed back.
        return `source_id ${typeof given === 'string' && given.length <= 64 ? `${JSON.stringify(given)} ` : ''}is not a source id: ${NOT_A_SOURCE_ID}`;
      }
      if (e.keyword === 'type' && /^\/params\/\d+$/.test(e.instancePath ?? '')) {
        const i = Number(e.instancePath!.slice('/params/'.length));
        const params = (args as { params?: unknown } | null | undefined)?.params;
        if (Array.isArray(params) && typeof params[i] === 'number') return inexactParamMessage(i);
      }
      // The schema's own list (trial nu40): "must be one of: get_document", not a bare "allowed values".
      if (e.keyword === 'enum' && Array.isArray(e.params?.allowedValues)) return `${at} must be one of: ${allowedList(e.params.allowedValues)}`;
      if (e.keyword === 'const' && e.params?.allowedValue !== undefined) return `${at} must be ${JSON.stringify(e.params.allowedValue)}`;
      return `${at} ${e.message ?? 'is invalid'}`;
    })
    .join('; ');
}

/**
 * Builds the bindings of the InterLock catalogue. A canonical tool without a handler answers the
 * opaque tool execution failure (never silently succeeds); pass every handler in production.
 */
export function interlockToolBindings(handlers: ToolHandlers): ToolBinding[] {
  const meta = catalogue.meta as Record<string, { canonical: string; governed: boolean; deprecated: boolean }>;
  return catalogue.tools.map((t) => {
    const m = meta[t.name];
    const v = (validators as unknown as Record<string, (d: unknown) => boolean & { errors?: unknown }>)[`validate${pascal(m.canonical)}Arguments`];
    if (!v) throw new Error(`generated/validators has no validator for ${m.canonical}`);
    const handler: ToolHandler =
      handlers[m.canonical] ?? (async () => ({ kind: 'tool_error', code: 'tool_execution_failed' }));
    return {
      name: t.name,
      title: t.title,
      description: t.description,
      inputSchema: t.inputSchema as Record<string, unknown>,
      governed: m.governed,
      canonical: m.canonical,
      deprecated: m.deprecated,
      validate(args: unknown): string | null {
        const fn = v as unknown as { (d: unknown): boolean; errors?: Array<{ instancePath?: string; message?: string; keyword?: string; params?: Record<string, unknown> }> | null };
        return fn(args) ? null : describeValidationErrors(fn.errors, args);
      },
      handler,
    };
  });
}

/** Default values of optional arguments (spec/mcp-tools-v1.json `defaults`). */
export { TOOL_DEFAULTS } from '../pipeline/types';
