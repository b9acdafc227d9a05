/**
 * Unknown fields in the request bodies of the admin API and the console (task hsm2 item 1): a body
 * field its schema in spec/openapi-v1.yaml does not allow (`additionalProperties: false`, at any
 * depth the schema closes) is refused with 400 `validation_failed` naming the field by its JSON
 * pointer, before the route runs, so nothing changes. The schemas are compiled from the spec by
 * `npm run generate` (generated/request-bodies-v1.ts). Other schema failures (a missing or
 * malformed field) are left to the routes' own checks and their messages.
 */
import type { RequestHandler } from 'express';
import type { ErrorObject } from 'ajv';
import type { Validator } from '../../generated/validators';
import { REQUEST_BODY_VALIDATORS } from '../../generated/request-bodies-v1';
import { sendError } from '../transport/http-errors';

/** Longest field pointer a refusal quotes, in characters (a longer one is cut and ends in …). */
export const MAX_FIELD_POINTER_CHARS = 64;
/** Most fields one refusal names (the rest are counted). */
export const MAX_FIELDS_NAMED = 5;

/** `name` as one JSON pointer token (RFC 6901: ~ → ~0, / → ~1). */
function pointerToken(name: string): string {
  return name.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** The unknown field an error reports (additionalProperties / unevaluatedProperties), as a JSON pointer, else null. */
function unknownPointer(e: ErrorObject): string | null {
  const name = e.keyword === 'additionalProperties' ? (e.params as { additionalProperty?: string }).additionalProperty : e.keyword === 'unevaluatedProperties' ? (e.params as { unevaluatedProperty?: string }).unevaluatedProperty : undefined;
  return typeof name === 'string' ? `${e.instancePath}/${pointerToken(name)}` : null;
}

/**
 * The JSON pointers (e.g. `/nmae`, `/settings/tls/mod`) of the fields of `body` that `validate`'s
 * schema does not allow, sorted; [] when the body conforms or fails only for other reasons.
 *
 * Several closed schemas may judge one object (the alternatives of a oneOf or anyOf, or a type's
 * settings chosen by if/then): a field counts only when every closed schema that refuses some field
 * of that object refuses it, so `{text, extra}` against "exactly one of text and document" names
 * `/extra`, not `/text`. Where an alternation covers the object and only one of its closed schemas
 * refuses fields, nothing is named there (the other alternatives failed for other reasons, and the
 * route's own checks answer).
 */
export function unknownBodyFields(validate: Validator, body: unknown): string[] {
  if (validate(body)) return [];
  const errors = validate.errors ?? [];
  const alternations = errors.filter((e) => e.keyword === 'oneOf' || e.keyword === 'anyOf').map((e) => e.instancePath);
  // instancePath -> schemaPath of a closed schema -> the fields it refuses there
  const refusals = new Map<string, Map<string, Set<string>>>();
  for (const e of errors) {
    const ptr = unknownPointer(e);
    if (ptr === null) continue;
    const bySchema = refusals.get(e.instancePath) ?? new Map<string, Set<string>>();
    refusals.set(e.instancePath, bySchema);
    bySchema.set(e.schemaPath, (bySchema.get(e.schemaPath) ?? new Set<string>()).add(ptr));
  }
  const out: string[] = [];
  for (const [at, bySchema] of refusals) {
    const [first, ...rest] = [...bySchema.values()];
    const covered = alternations.some((q) => at === q || at.startsWith(`${q}/`));
    if (covered && rest.length === 0) continue;
    for (const ptr of first!) if (rest.every((s) => s.has(ptr))) out.push(ptr);
  }
  return out.sort();
}

/** The refusal message naming `fields` (pointers), each cut at MAX_FIELD_POINTER_CHARS, at most MAX_FIELDS_NAMED. */
export function unknownFieldsMessage(fields: string[]): string {
  const cut = (p: string) => (p.length > MAX_FIELD_POINTER_CHARS ? `${p.slice(0, MAX_FIELD_POINTER_CHARS - 1)}…` : p);
  const named = fields.slice(0, MAX_FIELDS_NAMED).map(cut).join(', ');
  const more = fields.length > MAX_FIELDS_NAMED ? ` and ${fields.length - MAX_FIELDS_NAMED} more` : '';
  return `the body has ${fields.length === 1 ? 'a field' : 'fields'} this route does not accept (spec/openapi-v1.yaml): ${named}${more}`;
}

/**
 * The JSON types (e.g. ['object'], ['array', 'object']) `validate`'s schema allows at the top,
 * sorted, when `body`'s own top-level type is none of them; [] when it is one of them. Judged on an
 * empty value of the body's type ([] or {}; a string, number, boolean or null as it is): the type is
 * wrong when that value fails only by `type` at the top (and the oneOf/anyOf over them). Red team
 * rths: a route without a requestBody ran with `[]`, `"x"` or `null`.
 */
export function wrongBodyType(validate: Validator, body: unknown): string[] {
  const probe = Array.isArray(body) ? [] : body !== null && typeof body === 'object' ? {} : body;
  if (validate(probe)) return [];
  const top = (validate.errors ?? []).filter((e) => e.instancePath === '');
  if (!top.length || !top.every((e) => e.keyword === 'type' || e.keyword === 'oneOf' || e.keyword === 'anyOf')) return [];
  return [...new Set(top.filter((e) => e.keyword === 'type').map((e) => String((e.params as { type?: unknown }).type)))].sort();
}

/**
 * Middleware for the route `key` ('METHOD /path' with path parameters as {}, e.g.
 * 'POST /admin/v1/keys/{}/revoke'): answers 400 invalid_body when the body's top-level JSON type is
 * not one the route's schema allows (wrongBodyType: an array, string, number, boolean or null where
 * an object is expected), 400 validation_failed naming the body's unknown fields
 * (unknownBodyFields), and stops; else next(). Runs after jsonBody (req.body parsed; an empty body
 * is {}). Throws at mount time when the spec has no such operation, so every body route of the
 * admin API and the console is described there.
 */
export function closedBody(key: string): RequestHandler {
  const validate = REQUEST_BODY_VALIDATORS[key];
  if (!validate) throw new Error(`spec/openapi-v1.yaml has no POST, PUT or PATCH operation ${key} (admin API / console body routes must be described there)`);
  return (req, res, next) => {
    const types = wrongBodyType(validate, req.body);
    if (types.length) return sendError(res, 'invalid_body', `The body must be a JSON ${types.join(' or ')} (spec/openapi-v1.yaml)`);
    const fields = unknownBodyFields(validate, req.body);
    if (fields.length) return sendError(res, 'validation_failed', unknownFieldsMessage(fields));
    next();
  };
}
