/**
 * Creation of InterLock's row views on a source (issue 27, docs/row-rules.md): before the first
 * read that needs a view, its statements (row-rules.ts `rowViewStatements`) run through an
 * executor the gateway provides (the source's writer role); views known to exist are remembered
 * per source in memory; a view's copy (issue 27 item 1) is created after the views it reads. When they cannot be created, the read is refused `row_rules_unavailable`
 * (fail closed: a ruled table is never read unfiltered) and the reason is logged for operators.
 * Creations on one source are serialised in this process (their GRANTs on the schema would collide).
 */
import type { SourceRecord } from '../governance/store';
import { rowViewStatements, type RowView } from './row-rules';
import { ROW_VIEW_SCHEMA } from '../sql/row-rules/rewrite';

/** Runs one DDL statement on the source as a role that may create in schema interlock_rows. Rejects on failure. */
export type RowViewExecutor = (source: SourceRecord, sql: string) => Promise<void>;

/** Keeps a source's row views in place. */
export interface RowViewProvisioner {
  /**
   * Resolves true when every view exists (created now or before), false when one could not be
   * created (logged). With `snapshot` (the `scannedAt` of the catalogue the views were planned on):
   * a view whose creation failed 42P01 (a relation it reads is gone from the source) under that
   * snapshot is not tried again until another snapshot (a rescan): false at once, no statement
   * (baseGone tells why; red team rtn4 item 2).
   */
  ensure(source: SourceRecord, views: readonly RowView[], snapshot?: string): Promise<boolean>;
  /** True when one of `views` could not be created under `snapshot` because a relation it reads is gone (42P01). */
  baseGone(sourceId: string, views: readonly RowView[], snapshot: string): boolean;
  /** Forgets which views are known to exist on a source (after a failed read that may mean a view was dropped); what baseGone knows stays. */
  forget(sourceId: string): void;
}

/** Most views remembered per source before the memory is cleared (they are re-created idempotently). */
const MAX_KNOWN = 10_000;

/**
 * The provisioner over `exec`. `log` receives an operator-readable reason when creation fails
 * (never shown to agents). Concurrent calls for the same view share one creation.
 */
export function rowViewProvisioner(exec: RowViewExecutor, log?: (sourceId: string, view: string, err: unknown) => void): RowViewProvisioner {
  const known = new Map<string, Map<string, Promise<boolean>>>();
  // Per source: view name → the catalogue snapshot under which its creation failed 42P01 (bounded as `known`).
  const gone = new Map<string, Map<string, string>>();
  const goneOf = (sourceId: string) => {
    let g = gone.get(sourceId);
    if (!g || g.size > MAX_KNOWN) gone.set(sourceId, (g = new Map()));
    return g;
  };
  // Creations on one source run one after another: concurrent GRANTs on the schema fail
  // ("tuple concurrently updated"), which refused the first read needing two new views.
  const queues = new Map<string, Promise<boolean>>();
  const create = (source: SourceRecord, view: RowView, snapshot?: string): Promise<boolean> => {
    const next = (queues.get(source.id) ?? Promise.resolve(true)).then(() => createNow(source, view, snapshot));
    queues.set(source.id, next);
    void next.then(() => {
      if (queues.get(source.id) === next) queues.delete(source.id);
    });
    return next;
  };
  const createNow = async (source: SourceRecord, view: RowView, snapshot?: string): Promise<boolean> => {
    const reader = (source.settings.reader as { user?: unknown } | undefined)?.user;
    if (typeof reader !== 'string' || reader === '') {
      log?.(source.id, view.name, new Error('the source has no reader role to grant the view to'));
      return false;
    }
    try {
      for (const sql of rowViewStatements(view, reader)) await exec(source, sql);
      return true;
    } catch (err) {
      log?.(source.id, view.name, err);
      if (snapshot !== undefined && (err as { sqlState?: unknown } | null)?.sqlState === '42P01') goneOf(source.id).set(view.name, snapshot);
      return false;
    }
  };
  return {
    async ensure(source, views, snapshot) {
      if (snapshot !== undefined && this.baseGone(source.id, views, snapshot)) return false;
      let mine = known.get(source.id);
      if (!mine || mine.size > MAX_KNOWN) known.set(source.id, (mine = new Map()));
      const results: Array<Promise<boolean>> = [];
      for (const v of views) {
        let p = mine!.get(v.name);
        if (!p) {
          // A view's copy, or a row view over another InterLock view (a view's own rule over its copy,
          // rt27z Z5), reads the views listed before it (the plan lists them in dependency order).
          const before = v.definition !== undefined || v.schema === ROW_VIEW_SCHEMA ? [...results] : [];
          p = before.length ? Promise.all(before).then((oks) => (oks.every(Boolean) ? create(source, v, snapshot) : false)) : create(source, v, snapshot);
          mine!.set(v.name, p);
          // A failure is not remembered: the next read tries again.
          void p.then((ok) => {
            if (!ok && mine!.get(v.name) === p) mine!.delete(v.name);
          });
        }
        results.push(p);
      }
      return (await Promise.all(results)).every(Boolean);
    },
    baseGone(sourceId, views, snapshot) {
      const g = gone.get(sourceId);
      return g !== undefined && views.some((v) => g.get(v.name) === snapshot);
    },
    forget(sourceId) {
      known.delete(sourceId);
    },
  };
}

/**
 * Whether a ruled read's 42P01 (undefined_table) is one of InterLock's row views gone from the
 * source (dropped by an operator: made again and read once more) rather than a relation of the
 * agent's own statement dropped since the scan (answered as the statement error it is, with no
 * row-view statement and no retry: red team rtn4 item 2). Told by the error's position, which
 * PostgreSQL gives in characters of the statement sent (`sentSql`, the rewritten text): a row view
 * is referenced there as `interlock_rows.<name>` (src/sql/row-rules/rewrite.ts). Without a position
 * (a server that gives none), by the server's message naming `interlock_rows.`; when that message
 * is not PostgreSQL's English text either, taken as a row view (made again once per call, as before).
 */
export function missingRelationIsRowView(err: unknown, sentSql: string): boolean {
  const cause = (err as { cause?: { position?: unknown } } | null)?.cause;
  const position = typeof cause?.position === 'string' ? Number(cause.position) : NaN;
  if (Number.isInteger(position) && position >= 1) {
    return Array.from(sentSql).slice(position - 1, position - 1 + ROW_VIEW_SCHEMA.length + 1).join('') === `${ROW_VIEW_SCHEMA}.`;
  }
  const named = undefinedRelationObject(err);
  return named === undefined || named.startsWith(`${ROW_VIEW_SCHEMA}.`);
}

/** The relation a 42P01's server message names (`relation "x" does not exist`), for the operator's log only; undefined when it names none. */
export function undefinedRelationObject(err: unknown): string | undefined {
  const message = (err as { cause?: { message?: unknown } } | null)?.cause?.message;
  const m = typeof message === 'string' ? /^relation "(.+)" does not exist$/.exec(message) : null;
  return m ? m[1] : undefined;
}
