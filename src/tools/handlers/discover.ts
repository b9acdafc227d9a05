/**
 * interlock_discover (contract: interlock_discover; spec/mcp-tools-v1.json; issue 4, Build 4).
 *
 * Steps, in the contract's order: identity (the dispatcher) → source (granted and enabled, else
 * not_found / unavailable) → source-role authorization (some role on the source allows `discover`,
 * else forbidden source_role_denied) → policy (a refusing rule such as a time window → forbidden
 * policy_denied) → rate limit → search → audit (details source_id, action 'discover', row_count).
 * Per-asset visibility (category patterns, audience, hide_documents) is applied inside the SQL
 * (src/discovery/access.ts), so hidden assets are never counted, ranked or hinted at. Rows of
 * mapped SQL tables also follow interlock_query's read decisions and column masks on the columns
 * feeding each field (issue 12, src/discovery/fields.ts): a denied table's rows are invisible, a
 * denied or masked column's field is not searched, and is shown empty or masked.
 */
import catalogue from '../../../generated/tool-catalogue.json';
import type { ControlDb } from '../../control/db';
import { AccessEvaluator } from '../../governance/evaluator';
import type { GovernanceStore } from '../../governance/store';
import { sourceStep } from '../../pipeline/02-source';
import { rateLimitStep, type RateLimiter } from '../../pipeline/05-rate-limit';
import { TOOL_DEFAULTS } from '../registry';
import type { ToolCallContext, ToolHandler, ToolOutcome } from '../types';
import { mayAct, policyRefusal, resolveScope, type DiscoveryScope, type RowFilter, type RowFilterRequest } from '../../discovery/access';
import { cleanText } from '../../discovery/metadata';
import type { AccessEvaluator as Evaluator } from '../../governance/evaluator';
import type { ConnectorProvider } from '../../pipeline/07-execute';
import { planRowRules } from '../../pipeline/row-rules';
import { missingRelationIsRowView, type RowViewProvisioner } from '../../pipeline/row-views';
import { analyzeSql } from '../../sql/analyze';
import type { SourceCatalog } from '../../sql/catalog-types';
import { quoteIdent } from '../../sql/row-rules/predicate';
import type { Identity } from '../types';
import type { Policy } from '../../../generated/policy-v1';
import { policyRowRestrictions } from '../../governance/policies';
import type { SourceRecord } from '../../governance/store';
import type { RelationName } from '../../sql/catalog-types';
import type { LiveRelationTree } from '../../sql/hierarchy';
import { searchAssets, tsqueryRefuses, type DiscoverFilters } from '../../discovery/search';
import { DiscoverySearchSlots, DiscoverySearchTimeout } from '../../discovery/search-slots';

/** What the discovery tools need: the governance store, the shared rate limiter and the control database (the index). */
export interface DiscoveryDeps {
  store: GovernanceStore;
  rateLimiter: RateLimiter;
  /** The control database holding table `assets` (any object with a pg pool). */
  db: Pick<ControlDb, 'pool'>;
  now?: () => Date;
  /** The gateway's mask secret (the key of interlock_query's `hash` masks); without it `hash` masks show as `full`. */
  maskSecret?: string;
  /** The live relation hierarchy of a source (issue 22 item 1; red team rt1 RT1-6): mapped relations follow the trees the server has now. */
  liveTrees?: (source: SourceRecord, relations: readonly RelationName[]) => Promise<Map<string, LiveRelationTree>>;
  /**
   * Row rules on mapped rows (issue 27 item 3): the source's reader and the row-view provisioner
   * interlock_query uses. Without them, the mapped relations of a caller with row rules show nothing.
   */
  rowReads?: { connectors: ConnectorProvider; rowViews: RowViewProvisioner };
  /**
   * The process's discovery search slots (red team rt49b D1: src/discovery/search-slots.ts), shared
   * by interlock_discover and interlock_related_documents; without it each handler makes its own.
   */
  searchSlots?: DiscoverySearchSlots;
}

/**
 * The refusal of a search that did not run to its end (DiscoverySearchSlots.run): no slot freed in
 * time → concurrency_limited (status rate_limited, retryable, retry_after_ms); a statement ran past
 * the search limit → statement_timeout (status unavailable, retryable), its message naming the limit.
 */
export function searchRunRefusal(ran: { ok: false; retryAfterMs: number } | { ok: false; timeoutMs: number }): ToolOutcome {
  if ('timeoutMs' in ran) return { kind: 'refusal', code: 'statement_timeout', message: searchTimeoutMessage(ran.timeoutMs) };
  return { kind: 'refusal', code: 'concurrency_limited', extra: { retry_after_ms: ran.retryAfterMs } };
}

/** The message of a search cut by the discovery search limit of `timeoutMs` ms. */
export function searchTimeoutMessage(timeoutMs: number): string {
  return `The search ran longer than the discovery search limit (${timeoutMs} ms) and was cancelled; narrow the query (fewer OR terms, a filter) and try again.`;
}

/** Most permitted ids read per ruled mapped relation; more refuses the relation (its documents are not shown). */
export const MAX_PERMITTED_IDS = 200_000;

/**
 * The statement rowFilterFor plans for `r` (before its row-rule rewrite): the id column as text
 * (`interlock_row_id`) and the other mapped columns, from the relation. Its type is pg_catalog's
 * (red team rt48c K4: `::text` resolved a domain public.text under a reader path `public,
 * pg_catalog`, whose CHECK ran as the reader); test/unit/sources/qualified-statements.test.ts checks it.
 */
export function rowIdSql(r: RowFilterRequest): string {
  const cols = r.columns.map((c, i) => (i === 0 ? `(${quoteIdent(c)})::pg_catalog.text AS interlock_row_id` : quoteIdent(c))).join(', ');
  return `SELECT x.interlock_row_id FROM (SELECT ${cols} FROM ${quoteIdent(r.schema)}.${quoteIdent(r.table)}) x`;
}

/**
 * ambiguousIds' statement for `r`: the id texts (`k`) more than one row holds, or that start or end
 * with a character the indexer trims, with their counts (`n`). Every function, type and operator
 * pinned to pg_catalog (red team rt48c K4); in the parse-tree test.
 */
export function ambiguousIdsSql(r: RowFilterRequest): string {
  return (
    `SELECT x.k, pg_catalog.count(*)::pg_catalog.int4 AS n FROM (SELECT (${quoteIdent(r.idColumn)})::pg_catalog.text AS k FROM ${quoteIdent(r.schema)}.${quoteIdent(r.table)}) x ` +
    `GROUP BY x.k HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 1 OR x.k OPERATOR(pg_catalog.~) '^[^!-~]|[^!-~]$'`
  );
}

/**
 * resolveScope's row filter for `identity` on `source` (issue 27 item 3), when the deps have a
 * reader: the statement `SELECT x.id FROM (SELECT (id)::text AS id, <the other mapped columns> FROM
 * relation) x` is planned by interlock_query's row-rule step (planRowRules: views through their
 * copies, column allows over the columns the documents show, missing attributes refused), and the
 * ids of the permitted rows are read through the row views with the caller's attributes bound.
 * Ids more than one row may share as an asset id (ambiguousIds: duplicates, ids the indexer trims)
 * are left out: their one document may be another row's (red team rt27z finding Z1).
 * Any refusal, failure or truncation answers `none` (fail closed).
 */
export function rowFilterFor(deps: Pick<DiscoveryDeps, 'rowReads'>, source: SourceRecord, evaluator: Evaluator, identity: Identity, catalog: SourceCatalog | null, policies: Policy[]): RowFilter | undefined {
  const reads = deps.rowReads;
  if (!reads || !catalog) return undefined;
  // The caller's restrict_rows policies are ANDed with its roles' rules, as in interlock_query.
  const policyRows = policyRowRestrictions(policies, { identityId: identity.id, identityName: identity.name, roles: evaluator.roleNames(source.id), sourceId: source.id });
  return async (r) => {
    const sql = rowIdSql(r);
    const analysis = analyzeSql(sql, catalog);
    if (!analysis.ok) return { kind: 'none' };
    const plan = planRowRules({ evaluator, sourceId: source.id, analysis, catalog, attributes: identity.attributes, sql, policyRows, trustedFunctions: source.settings.trusted_functions });
    if (plan.kind === 'none') return { kind: 'all' };
    if (plan.kind === 'refused') return { kind: 'none' };
    // A row view dropped on the source (42P01; e.g. before a schema change, docs/row-rules.md) is
    // made again and the read run once more in this call, as interlock_query does (only a row view:
    // missingRelationIsRowView).
    for (let attempt = 0; ; attempt++) {
      try {
        if (!(await reads.rowViews.ensure(source, plan.plan.views, catalog.scannedAt))) {
          // A relation a row view reads gone since the scan: that relation shows nothing. Views that
          // cannot be created (no writer role, no schema interlock_rows; logged by the provisioner)
          // are interlock_query's row_rules_unavailable: the call is refused, not answered short.
          return reads.rowViews.baseGone(source.id, plan.plan.views, catalog.scannedAt) ? { kind: 'none' } : { kind: 'unavailable' };
        }
        const read = await reads.connectors.reader(source).read(plan.plan.sql, [], { maxRows: MAX_PERMITTED_IDS, maxBytes: 64 * 1024 * 1024, identityId: identity.id, settings: plan.plan.settings });
        if (read.truncated || read.guardTripped) return { kind: 'none' };
        const ambiguous = await ambiguousIds(reads.connectors.reader(source), r, identity.id);
        if (ambiguous === null) return { kind: 'none' };
        const ids = read.rowsArray.map((row) => row[0]).filter((v): v is string => typeof v === 'string');
        return { kind: 'ids', ids: ids.filter((id) => !ambiguous.has(assetIdKey(id))) };
      } catch (err) {
        // Only a row view gone is made again: a relation dropped since the scan (the mapped one,
        // read by ambiguousIds or through the views) answers none at once (rtn4 item 2).
        if ((err as { sqlState?: string }).sqlState === '42P01' && missingRelationIsRowView(err, plan.plan.sql)) {
          reads.rowViews.forget(source.id);
          if (attempt === 0) continue;
        }
        return { kind: 'none' };
      }
    }
  };
}

/** The part of a row's asset id the indexer makes from its id text (src/discovery/tables.ts rowToAsset). */
const assetIdKey = (id: string): string => cleanText(id).trim();

/**
 * The asset-id keys (assetIdKey) that more than one row of the mapped relation may share, read as
 * the reader without row rules (the rows the indexer reads): ids that occur more than once, and
 * ids the indexer trims (their first or last character is not printable ASCII), which may equal
 * another row's id once trimmed. The index holds one document per key, from one of those rows (the
 * first the indexer met), so a caller permitted one of them would be shown another's document (red
 * team rt27z finding Z1): a ruled caller is shown none of them. Null (show nothing of the relation)
 * when the read fails or returns more than MAX_PERMITTED_IDS keys.
 */
async function ambiguousIds(reader: { read: ReturnType<ConnectorProvider['reader']>['read'] }, r: RowFilterRequest, identityId: string): Promise<Set<string> | null> {
  const sql = ambiguousIdsSql(r);
  try {
    const read = await reader.read(sql, [], { maxRows: MAX_PERMITTED_IDS, maxBytes: 64 * 1024 * 1024, identityId });
    if (read.truncated || read.guardTripped) return null;
    const keys = new Set<string>();
    for (const [k, n] of read.rowsArray) {
      if (typeof k !== 'string') continue;
      const key = assetIdKey(k);
      if (Number(n) > 1 || key !== k) keys.add(key);
    }
    return keys;
  } catch {
    return null;
  }
}

/** resolveScope's live-hierarchy reader for `source`, when the deps have one. */
export function liveTreesFor(deps: DiscoveryDeps, source: SourceRecord): ((relations: readonly RelationName[]) => Promise<Map<string, LiveRelationTree>>) | undefined {
  return deps.liveTrees ? (relations) => deps.liveTrees!(source, relations) : undefined;
}

function maxLimit(tool: string, fallback: number): number {
  const t = (catalogue.tools as unknown as Array<{ name: string; inputSchema: { properties?: Record<string, { maximum?: number }> } }>).find((x) => x.name === tool);
  return t?.inputSchema.properties?.limit?.maximum ?? fallback;
}

/** Largest `limit` of interlock_discover (spec: 50). */
export const DISCOVER_MAX_LIMIT = maxLimit('interlock_discover', 50);
/** Largest `limit` of interlock_related_documents (spec: 50). */
export const RELATED_MAX_LIMIT = maxLimit('interlock_related_documents', 50);

/** The audit details object the dispatcher records for this call. */
export function auditDetails(ctx: ToolCallContext): Record<string, unknown> {
  return (ctx as ToolCallContext & { auditDetails?: Record<string, unknown> }).auditDetails ?? {};
}

/** A success outcome whose text is the JSON of `value` and whose structuredContent is `value`. */
export function jsonResult(value: Record<string, unknown>): ToolOutcome {
  return { kind: 'result', content: [{ type: 'text', text: JSON.stringify(value) }], structuredContent: value };
}

/** Clamps a requested limit to [1, max], defaulting to `dflt`. */
export function clampLimit(v: unknown, dflt: number, max: number): number {
  const n = typeof v === 'number' && Number.isFinite(v) ? Math.floor(v) : dflt;
  return Math.min(Math.max(1, n), max);
}

function strings(v: unknown): string[] | undefined {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : undefined;
}

/** Parses the filter arguments (already schema-valid); returns an error message for an unreadable time. */
export function parseFilters(args: Record<string, unknown>): { ok: true; filters: DiscoverFilters } | { ok: false; message: string } {
  const f: DiscoverFilters = {
    sourceTypes: strings(args.source_types),
    documentTypes: strings(args.document_types),
    categoryPath: strings(args.category_path),
    audience: strings(args.audience),
  };
  if (Array.isArray(args.entities)) f.entities = (args.entities as Array<{ type: string; value: string }>).map((e) => ({ type: String(e.type), value: String(e.value) }));
  const tr = args.time_range as { from?: unknown; to?: unknown } | undefined;
  if (tr && typeof tr === 'object') {
    const range: { from?: string; to?: string } = {};
    for (const k of ['from', 'to'] as const) {
      if (tr[k] === undefined) continue;
      const d = new Date(String(tr[k]));
      if (Number.isNaN(d.getTime())) return { ok: false, message: `time_range.${k} is not an ISO-8601 date-time` };
      range[k] = d.toISOString();
    }
    f.timeRange = range;
  }
  return { ok: true, filters: f };
}

/**
 * The refusal of a discovery call whose scope holds a mapped relation with row rules the source
 * cannot enforce now (DiscoveryScope.rowRulesUnavailable): `row_rules_unavailable` (503,
 * retryable), the code and default message interlock_query answers for a read of it; null otherwise.
 */
export function rowRulesRefusal(scope: DiscoveryScope): ToolOutcome | null {
  return scope.rowRulesUnavailable?.length ? { kind: 'refusal', code: 'row_rules_unavailable' } : null;
}

/** The answer to a query PostgreSQL cannot turn into a text-search query. */
const UNUSABLE_QUERY = 'The query cannot be turned into a PostgreSQL text-search query (for example a long run of "-" operators or a very long word); write it as plain words, "quoted phrases", OR and -word.';

/**
 * Builds the interlock_discover handler. Result (text JSON and structuredContent):
 * {hits: DiscoverHit[], truncated: boolean}; at most `limit` hits (default and maximum from
 * spec/: 10 and 50), expansions included. Refusals: unknown_source (404), source_disabled (503),
 * source_role_denied (403, no discover allow on the source), policy_denied (403), rate_limited
 * (429), row_rules_unavailable (503: a mapped relation's row rules for the caller cannot be enforced
 * now, rowRulesRefusal), concurrency_limited (429, retry_after_ms: no search slot freed in time,
 * src/discovery/search-slots.ts), statement_timeout (503: a ranking statement ran past the discovery
 * search limit, DISCOVERY_SEARCH_TIMEOUT_MS, and was cancelled); invalid_arguments for an unreadable time_range, or for query text PostgreSQL cannot turn into
 * a tsquery (checked only once the search failed). Other index errors → tool_execution_failed (opaque).
 */
export function discoverHandler(deps: DiscoveryDeps): ToolHandler {
  const now = deps.now ?? (() => new Date());
  const slots = deps.searchSlots ?? new DiscoverySearchSlots();
  return async (args, ctx) => {
    const identity = ctx.identity;
    if (!identity) return { kind: 'refusal', code: 'identity_required' };
    const audit = auditDetails(ctx);
    const sourceId = String(args.source_id);
    audit.source_id = sourceId;
    audit.action = 'discover';
    const parsed = parseFilters(args);
    if (!parsed.ok) return { kind: 'tool_error', code: 'invalid_arguments', message: parsed.message };

    const evaluator = new AccessEvaluator(await deps.store.grantsForIdentity(identity.id));
    const src = await sourceStep(deps.store, evaluator, sourceId);
    if (!src.ok) return src.outcome;

    const policies = await deps.store.activePolicies();
    const at = now();
    const subject = { identityId: identity.id, identityName: identity.name };
    const catalog = await deps.store.loadCatalog(sourceId);
    const scope = await resolveScope(deps.db.pool, evaluator, policies, subject, sourceId, 'discover', at, deps.maskSecret, catalog, liveTreesFor(deps, src.source), rowFilterFor(deps, src.source, evaluator, identity, catalog, policies));
    if (!mayAct(scope)) return { kind: 'refusal', code: 'source_role_denied', message: `No role granted on source '${sourceId}' allows discover.` };
    const refused = policyRefusal(policies, { ...subject, roles: evaluator.roleNames(sourceId), sourceId }, 'discover', at);
    if (refused) {
      audit.policy = refused.policy;
      return { kind: 'refusal', code: 'policy_denied', message: refused.reason };
    }
    const limited = await rateLimitStep(deps.rateLimiter, ctx, identity.id, sourceId);
    if (limited) return limited;
    const unenforceable = rowRulesRefusal(scope);
    if (unenforceable) return unenforceable;

    const limit = clampLimit(args.limit, TOOL_DEFAULTS.discover_limit, DISCOVER_MAX_LIMIT);
    const query = String(args.query);
    // The ranking statements hold a control-pool connection: one of a few search slots (rt49b D1).
    // Each of its statements is bounded in time (statement_timeout, task lows49b).
    const ran = await slots.run(identity.id, deps.db.pool, async (db) => {
      try {
        return await searchAssets(db, scope, { query, filters: parsed.filters, limit, expandRelated: args.expand_related === true });
      } catch (err) {
        if (err instanceof DiscoverySearchTimeout) throw err;
        // Text PostgreSQL cannot turn into a tsquery is the caller's input, not a failure (issue 22 item 6).
        if (await tsqueryRefuses(deps.db.pool, query)) return null;
        throw err;
      }
    }, ctx.signal);
    if (!ran.ok) return searchRunRefusal(ran);
    const out = ran.value;
    if (out === null) return { kind: 'tool_error', code: 'invalid_arguments', message: UNUSABLE_QUERY };
    audit.row_count = out.hits.length;
    return jsonResult({ hits: out.hits, truncated: out.truncated });
  };
}
