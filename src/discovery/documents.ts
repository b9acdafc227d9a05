/**
 * The `documents` source type (issue 4, Build 1): a folder of Markdown (.md, .markdown), plain-text
 * (.txt) and JSON (.json) files, read recursively. Hidden files and folders (name starting with
 * '.') and symbolic links are skipped, so a link cannot pull files from outside the folder.
 *
 * Metadata ("front matter"):
 * - .md/.txt: an optional YAML mapping between a first line `---` and a closing line `---` (or
 *   `...`); the rest of the file is the body.
 * - .json: a JSON object's own fields; the body is its `body` field when that is a string, else the
 *   object's remaining (non-metadata) fields as indented JSON. A JSON array or scalar is all body.
 * Fields: title (default: the first `# heading` of a Markdown body, else the file name),
 * document_type (default "document"), category_path (a list, or a string split on '/'; default the
 * file's folder path), timestamp (ISO-8601), audience (list), entities (list of {type, value}),
 * links (list of asset ids `<source>:<path>` or paths relative to the file).
 *
 * A file whose metadata cannot be read (bad YAML, an unclosed front matter block, a field of the
 * wrong type) is skipped and reported as a problem; it is never indexed with guessed metadata.
 */
import { lstat, readdir, readFile } from 'node:fs/promises';
import { basename, extname, join, posix } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { ControlError } from '../control/errors';
import type { AssetInput, IndexProblem } from './types';
import {
  capBody,
  cleanText,
  MAX_ASSET_ID_LENGTH,
  MetadataError,
  normAudience,
  normCategoryPath,
  normDocumentType,
  normEntities,
  normLinkList,
  normTimestamp,
  normTitle,
  resolveDocumentLink,
} from './metadata';
import { cutText } from '../errors/cut-text';

/** File extensions read (lower case). */
export const DOCUMENT_EXTENSIONS = ['.md', '.markdown', '.txt', '.json'] as const;
/** Largest file read, in bytes; larger files are skipped as problems. */
export const MAX_DOCUMENT_FILE_BYTES = 8 * 1024 * 1024;
/** Most files read from one folder. */
export const MAX_DOCUMENT_FILES = 200_000;
/** Document type of a file whose metadata names none. */
export const DEFAULT_DOCUMENT_TYPE = 'document';

const METADATA_FIELDS = new Set(['title', 'document_type', 'category_path', 'timestamp', 'audience', 'entities', 'links']);

/** Result of reading a folder: the items in path order and the files skipped. */
export interface DocumentsRead {
  items: AssetInput[];
  problems: IndexProblem[];
}

/** Thrown when the folder itself cannot be read (missing, not a folder, no permission). Nothing is indexed then. A ControlError of kind unavailable (CLI exit code 1). */
export class DocumentsFolderError extends ControlError {
  constructor(message: string) {
    super('unavailable', message);
    this.name = 'DocumentsFolderError';
  }
}

/** Splits a Markdown/text file into its front matter (null when there is none) and body. Throws MetadataError for an unclosed block. */
export function splitFrontMatter(text: string): { frontMatter: string | null; body: string } {
  const m = /^---[ \t]*\r?\n/.exec(text);
  if (!m) return { frontMatter: null, body: text };
  const rest = text.slice(m[0].length);
  const close = /^(?:---|\.\.\.)[ \t]*(?:\r?\n|$)/m.exec(rest);
  if (!close) throw new MetadataError('front matter starts with --- but is never closed');
  return { frontMatter: rest.slice(0, close.index), body: rest.slice(close.index + close[0].length) };
}

function parseFrontMatter(src: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = parseYaml(src, { maxAliasCount: 50, prettyErrors: false });
  } catch (err) {
    throw new MetadataError(`front matter is not valid YAML (${cutText((err as Error).message.split('\n')[0], 120)})`);
  }
  if (v === null || v === undefined) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new MetadataError('front matter must be a YAML mapping');
  return v as Record<string, unknown>;
}

function firstHeading(body: string): string | undefined {
  const m = /^#[ \t]+(.+?)[ \t#]*$/m.exec(body);
  return m ? cleanText(m[1]).trim() || undefined : undefined;
}

/**
 * Builds the AssetInput of one file from its relative path ('/'-separated) and its text.
 * Throws MetadataError when the metadata cannot be read. `notes` receives non-fatal remarks
 * (a body cut to MAX_BODY_CHARS).
 */
export function documentFromText(sourceId: string, relPath: string, text: string, notes: string[] = []): AssetInput {
  const ext = extname(relPath).toLowerCase();
  let meta: Record<string, unknown> = {};
  let body: string;
  if (ext === '.json') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new MetadataError('not valid JSON');
    }
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
      meta = parsed as Record<string, unknown>;
      if (typeof meta.body === 'string') body = meta.body;
      else {
        const rest = Object.fromEntries(Object.entries(meta).filter(([k]) => !METADATA_FIELDS.has(k) && k !== 'body'));
        body = Object.keys(rest).length ? JSON.stringify(rest, null, 2) : '';
      }
    } else {
      body = text;
    }
  } else {
    const split = splitFrontMatter(text.replace(/^\uFEFF/, ''));
    if (split.frontMatter !== null) meta = parseFrontMatter(split.frontMatter);
    body = split.body;
  }
  const capped = capBody(body);
  if (capped.cut) notes.push('body cut to the first 1,000,000 characters');
  const folder = posix.dirname(relPath);
  const title = normTitle(meta.title) ?? (ext === '.md' || ext === '.markdown' ? firstHeading(capped.body) : undefined) ?? basename(relPath, extname(relPath));
  const links: string[] = [];
  for (const l of normLinkList(meta.links)) {
    const id = resolveDocumentLink(sourceId, relPath, l);
    if (id && !links.includes(id)) links.push(id);
  }
  return {
    assetId: `${sourceId}:${relPath}`,
    documentType: normDocumentType(meta.document_type, DEFAULT_DOCUMENT_TYPE),
    title: cleanText(title),
    body: capped.body,
    categoryPath: meta.category_path === undefined || meta.category_path === null ? (folder === '.' ? [] : normCategoryPath(folder)) : normCategoryPath(meta.category_path),
    timestamp: normTimestamp(meta.timestamp),
    audience: normAudience(meta.audience),
    entities: normEntities(meta.entities),
    links,
  };
}

/**
 * Reads every document under `root` (see the module comment) as source `sourceId`, in path order.
 * `onItem(count)` is called after each file. Throws DocumentsFolderError when `root` is not a
 * readable folder; per-file failures are returned as problems.
 */
export async function readDocumentsFolder(sourceId: string, root: string, opts: { onItem?: (count: number) => void } = {}): Promise<DocumentsRead> {
  try {
    const st = await lstat(root);
    if (!st.isDirectory()) throw new DocumentsFolderError(`documents path is not a folder: ${root}`);
  } catch (err) {
    if (err instanceof DocumentsFolderError) throw err;
    throw new DocumentsFolderError(`cannot read the documents folder ${root} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  const files: string[] = [];
  const walk = async (rel: string): Promise<void> => {
    const entries = await readdir(rel === '' ? root : join(root, rel), { withFileTypes: true });
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      if (e.name.startsWith('.') || e.isSymbolicLink()) continue;
      const childRel = rel === '' ? e.name : `${rel}/${e.name}`;
      if (e.isDirectory()) await walk(childRel);
      else if (e.isFile() && (DOCUMENT_EXTENSIONS as readonly string[]).includes(extname(e.name).toLowerCase())) {
        if (files.length >= MAX_DOCUMENT_FILES) throw new DocumentsFolderError(`more than ${MAX_DOCUMENT_FILES} documents under ${root}`);
        files.push(childRel);
      }
    }
  };
  try {
    await walk('');
  } catch (err) {
    if (err instanceof DocumentsFolderError) throw err;
    throw new DocumentsFolderError(`cannot read the documents folder ${root} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  const items: AssetInput[] = [];
  const problems: IndexProblem[] = [];
  for (const rel of files) {
    const relPath = rel.normalize('NFC');
    try {
      if (`${sourceId}:${relPath}`.length > MAX_ASSET_ID_LENGTH) throw new MetadataError(`the path makes an asset id longer than ${MAX_ASSET_ID_LENGTH} characters`);
      const full = join(root, rel);
      const st = await lstat(full);
      if (st.size > MAX_DOCUMENT_FILE_BYTES) throw new MetadataError(`larger than ${MAX_DOCUMENT_FILE_BYTES} bytes`);
      const text = await readFile(full, 'utf8');
      const notes: string[] = [];
      items.push(documentFromText(sourceId, relPath, text, notes));
      for (const n of notes) problems.push({ item: relPath, reason: n, skipped: false });
    } catch (err) {
      const reason = err instanceof MetadataError ? err.message : `cannot read the file (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
      problems.push({ item: relPath, reason, skipped: true });
    }
    opts.onItem?.(items.length);
  }
  return { items, problems };
}
