/**
 * Normalisation of asset metadata (issue 4, Build 1–2): the front-matter fields of a document and
 * the mapped columns of a table row become the typed fields of an AssetInput. Invalid metadata is
 * an error (the item is skipped, never indexed with guessed metadata): an audience that cannot be
 * read must not turn into "visible to everyone".
 */
import { posix } from 'node:path';
import type { AssetEntity } from './types';
import { cutText } from '../errors/cut-text';

/** Largest body indexed, in characters; longer bodies are cut (PostgreSQL's tsvector is limited to 1 MB). */
export const MAX_BODY_CHARS = 1_000_000;
/** Longest asset id (spec: asset_id maxLength). */
export const MAX_ASSET_ID_LENGTH = 512;
/** Longest document type (spec: document_types items maxLength). */
export const MAX_DOCUMENT_TYPE_LENGTH = 64;
/** The source-id pattern (spec SourceId): a link starting with `<such id>:` is a full asset id. */
const ASSET_ID_PREFIX = /^[a-z0-9][a-z0-9_-]{0,62}:/;

/** Thrown for metadata that cannot be indexed; `message` names the field. */
export class MetadataError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MetadataError';
  }
}

/**
 * `s` without NUL characters (PostgreSQL text cannot hold them) and with every lone UTF-16
 * surrogate replaced by U+FFFD (PostgreSQL rejects them in JSON).
 */
export function cleanText(s: string): string {
  // eslint-disable-next-line no-control-regex
  const noNul = s.includes('\u0000') ? s.replace(/\u0000/g, '') : s;
  return noNul.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
}

function scalarText(v: unknown, field: string): string {
  if (typeof v === 'string') return cleanText(v).trim();
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  if (typeof v === 'boolean') return String(v);
  throw new MetadataError(`${field} must be a string`);
}

function list(v: unknown, field: string, split?: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (Array.isArray(v)) return v;
  if (typeof v === 'string') return split ? v.split(split) : [v];
  throw new MetadataError(`${field} must be a list`);
}

function dedupe(values: string[]): string[] {
  return [...new Set(values)];
}

/** A title: a non-empty string or number; undefined/null → undefined. */
export function normTitle(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  const t = scalarText(v, 'title');
  return t === '' ? undefined : t;
}

/** A document type: 1–64 characters; undefined/null → the default. */
export function normDocumentType(v: unknown, dflt: string): string {
  if (v === undefined || v === null) return dflt;
  const t = scalarText(v, 'document_type');
  if (t === '') return dflt;
  if (t.length > MAX_DOCUMENT_TYPE_LENGTH) throw new MetadataError(`document_type is longer than ${MAX_DOCUMENT_TYPE_LENGTH} characters`);
  return t;
}

/** A category path: a list of non-empty strings, or one string split on '/'; at most 32 parts of 128 characters. */
export function normCategoryPath(v: unknown): string[] {
  const parts = list(v, 'category_path', '/').map((p) => scalarText(p, 'category_path[]')).filter((p) => p !== '');
  if (parts.length > 32) throw new MetadataError('category_path has more than 32 parts');
  if (parts.some((p) => p.length > 128)) throw new MetadataError('a category_path part is longer than 128 characters');
  return parts;
}

/** A timestamp: an ISO-8601 string (a date alone means midnight UTC) or a Date; → ISO-8601 UTC or null. */
export function normTimestamp(v: unknown): string | null {
  if (v === undefined || v === null || v === '') return null;
  let d: Date;
  if (v instanceof Date) d = v;
  else if (typeof v === 'string') d = new Date(v.trim());
  else throw new MetadataError('timestamp must be an ISO-8601 string');
  if (Number.isNaN(d.getTime())) throw new MetadataError(`timestamp is not a date: ${cutText(String(v), 40)}`);
  return d.toISOString();
}

/** An audience: a list of non-empty strings, or one string split on ','; compared exactly with role audiences; at most 50. */
export function normAudience(v: unknown): string[] {
  const a = dedupe(list(v, 'audience', ',').map((x) => scalarText(x, 'audience[]')).filter((x) => x !== ''));
  if (a.length > 50) throw new MetadataError('audience has more than 50 entries');
  if (a.some((x) => x.length > 64)) throw new MetadataError('an audience is longer than 64 characters');
  return a;
}

/** Entities: a list of {type, value} (a JSON string of such a list is accepted); at most 200, deduplicated. */
export function normEntities(v: unknown): AssetEntity[] {
  let raw = v;
  if (typeof raw === 'string') {
    try {
      raw = JSON.parse(raw);
    } catch {
      throw new MetadataError('entities must be a list of {type, value}');
    }
  }
  const items = list(raw, 'entities');
  const out: AssetEntity[] = [];
  const seen = new Set<string>();
  for (const e of items) {
    if (!e || typeof e !== 'object' || Array.isArray(e)) throw new MetadataError('entities must be a list of {type, value}');
    const o = e as Record<string, unknown>;
    const type = scalarText(o.type, 'entities[].type');
    const value = scalarText(o.value, 'entities[].value');
    if (type === '' || value === '') throw new MetadataError('an entity has an empty type or value');
    if (type.length > 64 || value.length > 256) throw new MetadataError('an entity type (64) or value (256) is too long');
    const key = entityKey({ type, value });
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ type, value });
  }
  if (out.length > 200) throw new MetadataError('more than 200 entities');
  return out;
}

/** The key an entity is stored under in assets.entity_keys (unambiguous for any type and value). */
export function entityKey(e: AssetEntity): string {
  return JSON.stringify([e.type, e.value]);
}

/** Raw links: a list of strings (or one string split on ','); at most 200. */
export function normLinkList(v: unknown): string[] {
  const l = list(v, 'links', ',').map((x) => scalarText(x, 'links[]')).filter((x) => x !== '');
  if (l.length > 200) throw new MetadataError('more than 200 links');
  return l;
}

/**
 * Resolves a link of the document at `fromPath` (relative to the folder, '/'-separated):
 * - a URL (`scheme://…`) is dropped;
 * - `<source id>:<rest>` is a full asset id, kept as is (it may name another source: such links are
 *   stored but never followed);
 * - anything else is a path relative to the document's folder (`/x` is relative to the root);
 *   `#fragment` and `?query` are dropped; a path leaving the root is dropped (returns null).
 */
export function resolveDocumentLink(sourceId: string, fromPath: string, link: string): string | null {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(link)) return null; // a URL, not a document
  if (ASSET_ID_PREFIX.test(link)) return link.length <= MAX_ASSET_ID_LENGTH ? link : null;
  const bare = link.replace(/[#?].*$/, '');
  if (bare === '') return null;
  const joined = bare.startsWith('/') ? bare.slice(1) : posix.join(posix.dirname(fromPath), bare);
  const norm = posix.normalize(joined);
  if (norm === '.' || norm.startsWith('../') || norm === '..') return null;
  const id = `${sourceId}:${norm}`;
  return id.length <= MAX_ASSET_ID_LENGTH ? id : null;
}

/** Cuts a body to MAX_BODY_CHARS; returns it and whether it was cut. */
export function capBody(body: string): { body: string; cut: boolean } {
  const clean = cleanText(body);
  return clean.length > MAX_BODY_CHARS ? { body: cutText(clean, MAX_BODY_CHARS), cut: true } : { body: clean, cut: false };
}
