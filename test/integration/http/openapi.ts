/**
 * Validates real HTTP responses against spec/openapi-v1.yaml, so the routes and their description
 * cannot drift: the path template and method must be described, the status must be a documented
 * response, every required response header must be present and match its schema, the media type
 * must be one the response lists, and a JSON body must validate against the response schema.
 *
 * OpenAPI 3.1 schemas are JSON Schema 2020-12, so the validator is ajv's 2020 dialect (the
 * project's schema validator) with the document registered as a schema resource; its relative
 * references to spec/mcp-tools-v1.json, role-v1, policy-v1 and source-v1 resolve to those files
 * through their $id. Each validated (operationId, status) is recorded for coverage checks.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import YAML from 'yaml';

const SPEC = join(__dirname, '..', '..', '..', 'spec');
const DOC_ID = 'https://interlock.dev/spec/openapi-v1.yaml';

/** The parsed OpenAPI document. */
export const openapi = YAML.parse(readFileSync(join(SPEC, 'openapi-v1.yaml'), 'utf8')) as {
  paths: Record<string, Record<string, { operationId: string; responses: Record<string, unknown> }>>;
  components: { schemas: Record<string, Record<string, unknown>>; responses: Record<string, unknown>; headers: Record<string, unknown> };
};

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
for (const f of ['mcp-tools-v1.json', 'role-v1.schema.json', 'policy-v1.schema.json', 'source-v1.schema.json', 'interlock-file-v1.schema.json', 'config-v1.schema.json']) ajv.addSchema(JSON.parse(readFileSync(join(SPEC, f), 'utf8')));
ajv.addSchema({ ...openapi, $id: DOC_ID });

const compiled = new Map<string, ValidateFunction>();
function validatorAt(pointer: string): ValidateFunction {
  let v = compiled.get(pointer);
  if (!v) {
    v = ajv.compile({ $ref: `${DOC_ID}#${pointer}` });
    compiled.set(pointer, v);
  }
  return v;
}

const esc = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

function resolve(obj: unknown, pointer: string): { obj: Record<string, unknown>; pointer: string } {
  let o = obj as Record<string, unknown>;
  let p = pointer;
  while (o && typeof o.$ref === 'string' && o.$ref.startsWith('#/')) {
    p = o.$ref.slice(1);
    o = p
      .split('/')
      .slice(1)
      .reduce<unknown>((acc, part) => (acc as Record<string, unknown>)[part.replace(/~1/g, '/').replace(/~0/g, '~')], openapi) as Record<string, unknown>;
  }
  return { obj: o, pointer: p };
}

const templates = Object.keys(openapi.paths)
  .map((t) => ({ t, re: new RegExp('^' + t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+') + '$'), params: (t.match(/\{/g) ?? []).length }))
  .sort((a, b) => a.params - b.params);

/** (operationId, status) pairs validated so far in this test file. */
export const covered = new Set<string>();

/** What validateResponse needs of a response. */
export interface ResponseView {
  method: string;
  url: string;
  status: number;
  headers: Headers | Record<string, string>;
  body: string;
}

function header(h: Headers | Record<string, string>, name: string): string | null {
  if (h instanceof Headers) return h.get(name);
  const k = Object.keys(h).find((x) => x.toLowerCase() === name.toLowerCase());
  return k === undefined ? null : h[k];
}

/** Problems of one response against the document ([] when it conforms). */
export function validateResponse(r: ResponseView): string[] {
  const path = new URL(r.url, 'http://x').pathname;
  const tpl = templates.find((x) => x.re.test(decodeURIComponentSafe(path)) || x.re.test(path));
  if (!tpl) return [`${path}: no path of the OpenAPI document matches`];
  const method = r.method.toLowerCase();
  const op = openapi.paths[tpl.t][method];
  if (!op) return [`${method.toUpperCase()} ${tpl.t}: not described`];
  const where = `${method.toUpperCase()} ${tpl.t} → ${r.status}`;
  const key = String(r.status) in op.responses ? String(r.status) : `${String(r.status)[0]}XX` in op.responses ? `${String(r.status)[0]}XX` : 'default' in op.responses ? 'default' : null;
  if (!key) return [`${where}: status not documented (documented: ${Object.keys(op.responses).join(', ')})`];
  covered.add(`${op.operationId} ${r.status}`);
  const { obj: resp, pointer } = resolve(op.responses[key], `/paths/${esc(tpl.t)}/${method}/responses/${key}`);
  const problems: string[] = [];
  for (const [name, h] of Object.entries((resp.headers ?? {}) as Record<string, unknown>)) {
    const { obj: hdr, pointer: hp } = resolve(h, `${pointer}/headers/${esc(name)}`);
    const value = header(r.headers, name);
    if (value === null) {
      if (hdr.required) problems.push(`${where}: required header ${name} missing`);
      continue;
    }
    const v = validatorAt(`${hp}/schema`);
    if (!v(value)) problems.push(`${where}: header ${name}=${JSON.stringify(value)}: ${ajv.errorsText(v.errors)}`);
  }
  const content = resp.content as Record<string, unknown> | undefined;
  if (!content) {
    if (r.body.length > 0) problems.push(`${where}: documented without a body, got ${JSON.stringify(r.body.slice(0, 80))}`);
    return problems;
  }
  const ct = (header(r.headers, 'content-type') ?? '').split(';')[0].trim().toLowerCase();
  if (!(ct in content)) return [...problems, `${where}: content type ${ct || '(none)'} not documented (${Object.keys(content).join(', ')})`];
  if (ct === 'application/json') {
    let json: unknown;
    try {
      json = JSON.parse(r.body);
    } catch {
      return [...problems, `${where}: body is not JSON`];
    }
    const v = validatorAt(`${pointer}/content/${esc(ct)}/schema`);
    if (!v(json)) problems.push(`${where}: body ${JSON.stringify(json).slice(0, 300)} — ${ajv.errorsText(v.errors, { separator: '; ' })}`);
  }
  return problems;
}

function decodeURIComponentSafe(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Problems of `value` against components.schemas[name]. */
export function validateComponent(name: string, value: unknown): string[] {
  const v = validatorAt(`/components/schemas/${name}`);
  return v(value) ? [] : [`${name}: ${JSON.stringify(value).slice(0, 300)} — ${ajv.errorsText(v.errors, { separator: '; ' })}`];
}

/** A fetched response with its text, parsed JSON (when JSON) and the OpenAPI problems. */
export interface CheckedResponse {
  status: number;
  headers: Headers;
  text: string;
  json: any;
  problems: string[];
}

/** fetch + validateResponse. */
export async function checkedFetch(url: string, init: RequestInit = {}): Promise<CheckedResponse> {
  const res = await fetch(url, init);
  const text = await res.text();
  let json: unknown = undefined;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  const problems = validateResponse({ method: init.method ?? 'GET', url, status: res.status, headers: res.headers, body: text });
  return { status: res.status, headers: res.headers, text, json, problems };
}

/** Every (operationId, status) the document describes for paths starting with `prefix`. */
export function documented(prefix: string): string[] {
  const out: string[] = [];
  for (const [p, item] of Object.entries(openapi.paths)) {
    if (!p.startsWith(prefix)) continue;
    for (const op of Object.values(item)) for (const status of Object.keys(op.responses)) out.push(`${op.operationId} ${status}`);
  }
  return out;
}

/** Every operationId of paths starting with `prefix`. */
export function operations(prefix: string): string[] {
  return Object.entries(openapi.paths)
    .filter(([p]) => p.startsWith(prefix))
    .flatMap(([, item]) => Object.values(item).map((op) => op.operationId));
}
