/**
 * Errors of the control plane. Each carries a `kind` the operator CLI maps to its exit code
 * (validation/conflict → 2, not_found → 3, anything else → 1) and a message written for people:
 * no stack traces, no driver text, no secrets.
 */
import { closestName } from '../errors/suggest';

/** What went wrong, as the CLI reports it. */
export type ControlErrorKind = 'validation' | 'conflict' | 'not_found' | 'forbidden' | 'unavailable';

/** A user-facing control-plane error. `details` lists further lines (e.g. schema error paths). */
export class ControlError extends Error {
  constructor(
    readonly kind: ControlErrorKind,
    message: string,
    readonly details: string[] = [],
  ) {
    super(message);
    this.name = 'ControlError';
  }
}

/** Input failed validation (a schema, a name pattern, a date). CLI exit code 2. */
export class ValidationError extends ControlError {
  constructor(message: string, details: string[] = []) {
    super('validation', message, details);
    this.name = 'ValidationError';
  }
}

/** The thing already exists or is in a state that forbids the change. CLI exit code 2. */
export class ConflictError extends ControlError {
  constructor(message: string, details: string[] = []) {
    super('conflict', message, details);
    this.name = 'ConflictError';
  }
}

/** The named identity, key, source, role, policy or approval does not exist. CLI exit code 3. */
export class NotFoundError extends ControlError {
  constructor(message: string) {
    super('not_found', message);
    this.name = 'NotFoundError';
  }
}

/**
 * A change would keep a stored source password for another endpoint (issue 24, item 1): the
 * password must be given again. Validation kind (CLI exit code 2); the admin API and console answer
 * 400 with code password_required (spec/errors-v1.json operatorRefusals).
 */
export class PasswordRequiredError extends ValidationError {
  /** The client-visible code. */
  readonly code = 'password_required';
  constructor(message: string, details: string[] = []) {
    super(message, details);
    this.name = 'PasswordRequiredError';
  }
}

/**
 * Formats ajv errors as "path: message" lines ("/statements/0/effect: must be equal to one of the
 * allowed values (allow, deny)"). With `knownKeys` (the keys the schema allows at an ajv
 * `schemaPath` ending in /additionalProperties, or undefined), an unknown key near a known one says
 * which: `unknown key "prot" (not allowed here; did you mean port?)`. With `missingHint` (the text
 * telling what a required property missing at an ajv `schemaPath` ending in /required may hold, or
 * undefined), the line names it: `must have required property 'tls' ({"mode": "off" | "require" | …})`.
 */
export function formatSchemaErrors(
  errors: ReadonlyArray<{ instancePath: string; schemaPath?: string; message?: string; keyword: string; params: Record<string, unknown> }> | null | undefined,
  root = '',
  knownKeys?: (schemaPath: string) => readonly string[] | undefined,
  missingHint?: (schemaPath: string, property: string) => string | undefined,
): string[] {
  if (!errors || errors.length === 0) return [];
  const lines = new Set<string>();
  for (const e of errors) {
    // oneOf/anyOf summaries add nothing to the branch errors that precede them.
    if (e.keyword === 'oneOf' || e.keyword === 'anyOf' || e.keyword === 'if') continue;
    const at = (root + e.instancePath) || '/';
    let msg = e.message ?? e.keyword;
    if (e.keyword === 'additionalProperties' && typeof e.params.additionalProperty === 'string') {
      const known = e.schemaPath && knownKeys ? knownKeys(e.schemaPath) : undefined;
      const near = known ? closestName(e.params.additionalProperty, known) : null;
      msg = `unknown key "${e.params.additionalProperty}" (not allowed here${near ? `; did you mean ${near}?` : ''})`;
    } else if (e.keyword === 'required' && typeof e.params.missingProperty === 'string' && e.schemaPath && missingHint) {
      const hint = missingHint(e.schemaPath, e.params.missingProperty);
      if (hint) msg = `${msg} (${hint})`;
    } else if (e.keyword === 'enum' && Array.isArray(e.params.allowedValues)) {
      msg = `${msg} (${(e.params.allowedValues as unknown[]).map(String).join(', ')})`;
    } else if (e.keyword === 'const' && e.params.allowedValue !== undefined) {
      msg = `must be ${JSON.stringify(e.params.allowedValue)}`;
    }
    lines.add(`${at}: ${msg}`);
  }
  return [...lines];
}
