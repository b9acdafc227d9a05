/**
 * interlock_query's pipeline, in the contract's order (Governance And Errors): identity (step 1,
 * done by the dispatcher) → source → source-role authorization → policy → rate limit → write
 * safety → execution → redaction → audit (recorded by the dispatcher from ctx.auditDetails).
 * Each step is its own module under src/pipeline/; this file only composes them.
 */
import { createHash } from 'node:crypto';
import type { Pool } from 'pg';
import { analyzeSql, complexityLimitsFromSettings } from '../sql/analyze';
import type { ComplexityLimits } from '../sql/complexity';
import type { SourceCatalog } from '../sql/catalog-types';
import type { AccessEvaluator } from '../governance/evaluator';
import type { GovernanceStore, MaybePromise, SourceRecord } from '../governance/store';
import type { ToolCallContext, ToolHandler, ToolOutcome } from './types';
import { TOOL_DEFAULTS } from './types';
import { sourceStep } from './02-source';
import { analysisRefusal, authorizeStatement, describesColumn, untrustedFunction } from './03-authorize';
import { policyStep } from './04-policy';
import { rateLimitStep, type RateLimiter } from './05-rate-limit';
import { writeSafetyStep, writerPrivilegeRefusal } from './06-write-safety';
import { mapConnectorError, permissionDeniedObject, SQLSTATE_INSUFFICIENT_PRIVILEGE, type ConnectorProvider, type TruncatedBy } from './07-execute';
import { checkHierarchy, hierarchySensitive, hitNeedsCheck, standaloneGuardFor, type HierarchyCheck } from './hierarchy-check';
import { redactRows } from './08-redact';
import { maskedStatement } from '../sql/mask-sql';
import { lacksTypeFacts } from '../sql/type-code';
import type { AuditHooks } from '../audit/types';
import { statementAuditFacts } from './audit-facts';
import { hitOutcome, type ResultCache } from './cache';
import type { Policy } from '../../generated/policy-v1';
import { rowsText } from './rows-json';
import { inexactJsonNumber, inexactParamMessage } from './json-numbers';
import { AnalysisCache, contentFingerprint, evaluatorFor, hasTimeWindows, type CachedAnalysis, type CachedPolicy } from './analysis-cache';
import { bindRowRules, hasAnyRowRules, shapeRowRules, type RowRulePlan, type RowRuleShape } from './row-rules';
import { policyRowRestrictions } from '../governance/policies';
import { missingRelationIsRowView, undefinedRelationObject, type RowViewProvisioner } from './row-views';

/** What the query pipeline needs. */
export interface QueryPipelineDeps {
  store: GovernanceStore;
  connectors: ConnectorProvider;
  rateLimiter: RateLimiter;
  cache: ResultCache;
  /** Catalog of a source (loaded from the control database; null when never scanned); synchronous when cached. */
  catalog(source: SourceRecord): MaybePromise<SourceCatalog | null>;
  /** Largest serialized result in bytes (default 4 MiB); beyond it rows are cut and truncated is true. */
  maxResultBytes?: number;
  /** Secret for the hash mask method. */
  maskSecret: string;
  now?: () => Date;
  /**
   * Cache of steps 3 and 4 (analysis-cache.ts); the gateway passes one it clears on control-table
   * notifications. Absent: the handler keeps its own (safe: keys carry the grants, catalog and
   * policies by content).
   */
  analysisCache?: AnalysisCache;
  /**
   * Creates the row views row-ruled reads need (issue 27, row-views.ts). Absent: a read of a
   * row-ruled table is refused `row_rules_unavailable` (never run unfiltered).
   */
  rowViews?: RowViewProvisioner;
  /**
   * Told once per governed read the source refused with 42501 (the reader role lacks a grant; task
   * hnu4a item 2): the source, the object the server's message names (operator text, never the
   * agent's) and the request id. The gateway logs it as a warning for operators.
   */
  onSourcePermissionDenied?: (facts: { sourceId: string; object?: string; requestId: string }) => void;
  /**
   * Called when a read fails 42P01 (undefined_table) on a relation of the agent's statement, not a
   * row view: a relation the scanned catalogue holds was dropped on the source since the scan, so
   * the catalogue is stale (red team rtn4 item 2). `object` is the relation the server named (for
   * operators only). The gateway marks the catalogue stale and logs it, once a minute per relation.
   */
  onRelationGone?: (facts: { sourceId: string; object?: string; requestId: string }) => void;
  /**
   * Called when a statement is refused `catalog_stale` (task hf5): a read's function guard found a
   * user function the statement runs changed on the source since the scan (`functions_changed`), or
   * the snapshot was scanned before the type facts existed (`snapshot_outdated`, typeHelpers
   * `lacksTypeFacts`), or a new reader connection resolves names on another path than the scan
   * recorded (`search_path_changed`: a schema of that path dropped since; task flake47). The gateway
   * rescans the source (one scan at a time per source) and logs it.
   */
  onCatalogStale?: (facts: { sourceId: string; requestId: string; reason: 'functions_changed' | 'columns_changed' | 'catalog_changed' | 'snapshot_outdated' | 'search_path_changed' }) => void;
  /** Called after a documents-source request (issue 4) — absent means such sources answer request refusals. */
  connectorRequest?: (source: SourceRecord, request: Record<string, unknown>, ctx: ToolCallContext, evaluator: AccessEvaluator) => Promise<ToolOutcome>;
}

/** The complexity limits per source settings object (frozen: the analysis key's prefix is made once for them). */
const complexities = new WeakMap<object, ComplexityLimits>();

/**
 * complexityLimitsFromSettings of `settings`, made once per settings object (the store hands out the
 * same object until the source changes) and frozen, so the analysis cache keys it without reading
 * it again per call (issue 28, h28l).
 */
function complexityOf(settings: SourceRecord['settings']): ComplexityLimits {
  if (settings === null || typeof settings !== 'object') return complexityLimitsFromSettings(settings);
  let c = complexities.get(settings);
  if (!c) complexities.set(settings, (c = Object.freeze(complexityLimitsFromSettings(settings))));
  return c;
}

/** Audit facts collected along the pipeline (never values, never keys). */
function details(ctx: ToolCallContext): Record<string, unknown> {
  return (ctx as ToolCallContext & { auditDetails?: Record<string, unknown> }).auditDetails ?? {};
}

/** Builds the interlock_query handler. */
export function queryHandler(deps: QueryPipelineDeps): ToolHandler {
  const now = deps.now ?? (() => new Date());
  const analyses = deps.analysisCache ?? new AnalysisCache();
  const handler = pipeline(deps, now, analyses);
  // Every event of a call with a statement records its fingerprint, also when the call was refused
  // before analysis finished (parse or classification time, issue 11): never the text itself.
  // One `then` after the pipeline, not an async wrapper awaiting it (issue 28, h28l: one promise and
  // one resumption less per call); the pipeline's rejection passes through unchanged.
  return (args, ctx) =>
    handler(args, ctx).then((out) => {
      const audit = details(ctx);
      if (typeof args.sql === 'string' && typeof audit.fingerprint !== 'string') {
        const facts = statementAuditFacts(args.sql, deps.maskSecret);
        Object.assign(audit, facts);
        // A parser's message can quote the text; the analyser's name only identifiers.
        if (facts.statement_unparsed) delete audit.refusal_message;
      }
      return out;
    });
}

function pipeline(deps: QueryPipelineDeps, now: () => Date, analyses: AnalysisCache): ToolHandler {
  return async (args, ctx) => {
    const identity = ctx.identity;
    if (!identity) return { kind: 'refusal', code: 'identity_required' };
    const audit = details(ctx);
    const sourceId = String(args.source_id);
    audit.source_id = sourceId;

    // What the store and the limiter hold in memory comes back synchronously (MaybePromise): no promise
    // or await per call for it (issue 28 item 3, promise churn); `instanceof Promise` awaits the rest.
    const g = deps.store.grantsForIdentity(identity.id);
    const grants = g instanceof Promise ? await g : g;
    const evaluator = evaluatorFor(grants);
    // Step 2: source.
    const s2 = sourceStep(deps.store, evaluator, sourceId);
    const src = s2 instanceof Promise ? await s2 : s2;
    if (!src.ok) return src.outcome;
    const source = src.source;

    if (source.type !== 'postgres') {
      audit.action = 'request';
      if (typeof args.request !== 'object' || args.request === null) {
        return { kind: 'tool_error', code: 'invalid_arguments', message: `Source '${sourceId}' is a ${source.type} source: send request (e.g. {"operation":"get_document","asset_id":"…"}) instead of sql.` };
      }
      if (!deps.connectorRequest) return { kind: 'tool_error', code: 'tool_execution_failed' };
      return deps.connectorRequest(source, args.request as Record<string, unknown>, ctx, evaluator);
    }
    if (typeof args.sql !== 'string') return { kind: 'tool_error', code: 'invalid_arguments', message: `Source '${sourceId}' is a SQL source: send sql.` };
    const sql = args.sql;
    const params = Array.isArray(args.params) ? (args.params as unknown[]) : [];

    // Step 3: source-role authorization over the parsed statement (cached by statement, catalog and grants).
    const c = deps.catalog(source);
    const catalog = c instanceof Promise ? await c : c;
    if (!catalog) return { kind: 'refusal', code: 'source_not_catalogued' };
    // A snapshot scanned before the code attached to types was recorded would let casts and
    // operator-class functions run uncounted: stale, rescanned now (task hf5).
    if (lacksTypeFacts(catalog)) {
      deps.onCatalogStale?.({ sourceId, requestId: ctx.requestId, reason: 'snapshot_outdated' });
      return CATALOG_STALE;
    }
    const complexity = complexityOf(source.settings);
    const cached = analyses.analyse({ sourceId, sql, catalog, grants, complexity }, () => authorizeSql(evaluator, sourceId, sql, catalog, complexity));
    const { analysis, relations } = cached.entry;
    if (!analysis.ok) {
      audit.reason_detail = analysis.code;
      // Quoted names are withheld: an agent may have put a value where an identifier goes
      // (`WHERE phone = "+55 …"`), and the audit must not store values (red-team F6).
      audit.refusal_message = analysis.message.replace(/"(?:[^"]|"")*"/g, '"…"');
      return cached.entry.denied!;
    }
    audit.action = analysis.kind;
    audit.fingerprint = analysis.fingerprint;
    audit.relations = relations;
    if (analysis.paramCount !== params.length) {
      return { kind: 'tool_error', code: 'invalid_arguments', message: `The statement uses ${analysis.paramCount} parameter(s) ($1…) but params has ${params.length}.` };
    }
    // A JSON number beyond ±(2^53−1) was rounded when the request was read (9007199254740993 arrives
    // as 9007199254740992), and so was one with more significant digits than a double keeps
    // (0.12345678901234567891; its text was looked at when the body was parsed: json-numbers.ts):
    // running it would answer, or queue a write, for a value the agent did not send (red team rt46a
    // P1, task low48). Such values must come as strings, which PostgreSQL reads exactly.
    const inexact = params.findIndex((p, i) => typeof p === 'number' && (!Number.isFinite(p) || (Number.isInteger(p) && !Number.isSafeInteger(p)) || inexactJsonNumber(params, i)));
    if (inexact >= 0) {
      return { kind: 'tool_error', code: 'invalid_arguments', message: inexactParamMessage(inexact) };
    }
    const untrusted = untrustedFunction(analysis, source.settings.trusted_functions);
    if (untrusted) return untrusted;
    if (cached.entry.denied) return cached.entry.denied;

    // Step 4: policy (cached with the statement unless a time-window policy makes it depend on the clock).
    const p = deps.store.activePolicies();
    const policies = p instanceof Promise ? await p : p;
    const subject = { identityId: identity.id, identityName: identity.name, roles: evaluator.roleNames(sourceId), sourceId };
    const decidePolicy = (): CachedPolicy => {
      const r = policyStep(policies, subject, analysis, catalog, now(), undefined, describesColumn(evaluator, sourceId, catalog));
      // Whether the caller is hierarchy-checked is bound too (red team rtc, RTC-1): an unchecked caller's
      // read stores what the server's tree held, which a checked caller with the same roles must not be served.
      return r.ok ? { ok: true, restrictions: r.restrictions, accessFingerprint: accessFingerprintOf(evaluator.statements(sourceId), r.restrictions.fingerprint, hierarchySensitive(evaluator, sourceId, policies, subject)) } : r;
    };
    const pol = hasTimeWindows(policies) ? decidePolicy() : cached.policy(AnalysisCache.policyKey(policies, subject), decidePolicy);
    if (!pol.ok) return pol.outcome;

    // Step 5: rate limit.
    const r5 = rateLimitStep(deps.rateLimiter, ctx, identity.id, sourceId);
    const limited = r5 instanceof Promise ? await r5 : r5;
    if (limited) return limited;

    // A cached answer over relations that stand alone (issue 28) is served without the live hierarchy
    // check: it was stored only by a read whose guard (same round trip) found the catalogue's tree
    // (below: no store when the tree changed), under a key binding the caller's grants, restrictions,
    // whether it is checked, row-rule bindings, the catalogue snapshot and the active policies
    // (cacheKey). It discloses only rows a caller with the same access was allowed when it was read:
    // the same staleness, bounded by the cache's time to live, that the cache already accepts for data
    // (docs/architecture.md step 6½). Over a relation in a tree a checked caller's hit is checked first (RTC-3).
    const policyRows = policyRowRestrictions(policies, subject);
    const rowRulesHere = hasAnyRowRules(evaluator, sourceId, policyRows);
    // Row rules (issue 27): the rewrite of a text is cached with the statement's analysis (same key:
    // the catalogue, the caller's grants so its rules) and the caller's restricting policies' content;
    // only the caller's attribute values are bound per call. Its refusal is answered after the
    // hierarchy check's, as before.
    const rowShape = (runSql: string): RowRuleShape =>
      rowRulesHere ? cached.rowRules(policyRows.any ? `${runSql}\u0000${policyRows.key}` : runSql, () => shapeRowRules({ evaluator, sourceId, analysis, catalog, sql: runSql, policyRows })) : NO_ROW_RULES;
    const rows = bindRowRules(rowShape(sql), identity.attributes, source.settings.trusted_functions);
    const requested = typeof args.max_rows === 'number' ? args.max_rows : TOOL_DEFAULTS.max_rows;
    const sourceCap = typeof source.settings.max_rows === 'number' ? source.settings.max_rows : Infinity;
    // Built only for a read that may be stored: with the cache disabled no key is hashed (issue 28 item 3).
    const key = deps.cache.enabled && analysis.kind === 'read' && analysis.cacheable && rows.kind !== 'refused'
      ? cacheKey(deps.cache, { sourceId, sql, params, maxRows: Math.min(requested, sourceCap, pol.restrictions.maxRows ?? Infinity), accessFingerprint: rows.kind === 'ruled' ? `${pol.accessFingerprint}\u0000rows:${rows.plan.bindingKey}` : pol.accessFingerprint }, catalog, policies)
      : null;
    const hit = key ? deps.cache.get(key) : undefined;

    // Before write safety and execution: the relation hierarchy as the server has it now (issue 22
    // item 1); a change since the scan re-decides steps 3 and 4 and the answer is not stored. Writes
    // too: a partition attached under a write-denied parent is refused (red team rt1).
    // A write is still queued when the server cannot be asked (its source down): nothing runs before
    // an approval, and the approval asks the server again (src/approvals/execute.ts).
    const connector = deps.connectors.reader(source);
    const checkInput = { connector, evaluator, sourceId, analysis, catalog, policies, subject, sql };
    const fullCheck = () => checkHierarchy({ ...checkInput, now: now(), restrictions: pol.restrictions, signal: ctx.signal, identityId: identity.id });
    let hier: HierarchyCheck | null = null;
    if (hit) {
      // Over a relation in a tree the stored answer may have raced a partition attached between its
      // check and its read (RTC-3): checked first; on another tree the read is decided again, unstored.
      if (hitNeedsCheck(checkInput)) {
        hier = await fullCheck();
        if (!hier.ok) return hier.outcome;
      }
      if (!hier || !hier.changed) {
        if (rows.kind === 'ruled') audit.row_rules = rows.plan.applied;
        audit.row_count = hit.rows.length;
        audit.cached = true;
        // One answer object per stored entry, rendered to its final bytes once (cache.ts hitOutcome).
        return hitOutcome(hit, () => queryResult(hit.rows, hit.truncated, true, hit.maskedColumns, hit.truncatedBy));
      }
    }

    // A read whose relations the catalogue places in no tree is checked in its own round trip: a
    // guard before the statement lets it run only if the server proves they still stand alone;
    // otherwise (guard tripped) the full check runs first (issue 23, bench 01).
    let guard = hier ? null : standaloneGuardFor(checkInput);
    hier ??= guard ? { ok: true, changed: false, restrictions: pol.restrictions } : await fullCheck();
    if (!hier.ok && !(hier.unreachable && analysis.kind === 'write')) return hier.outcome;
    // Row rules are planned on the catalogue's tree (a partition carries its parent's rule): when the
    // server's tree differs from it, the plan could miss a rule, so the read is refused until a rescan.
    if (hier.ok && hier.changed && rowRulesHere) return STALE_TREE_REFUSAL;
    let restrictions = hier.ok ? hier.restrictions : pol.restrictions;
    /** After a tripped guard: the full check; an outcome when it refuses, else null (restrictions updated). */
    const recheck = async (): Promise<ToolOutcome | null> => {
      guard = null;
      hier = await fullCheck();
      if (!hier.ok) return hier.outcome;
      if (hier.changed && rowRulesHere) return STALE_TREE_REFUSAL;
      restrictions = hier.restrictions;
      return null;
    };

    if (rows.kind === 'refused') {
      audit.reason_detail = rows.outcome.kind === 'refusal' ? rows.outcome.code : undefined;
      audit.row_rule_refusal = rows.reason;
      return rows.outcome;
    }

    // Step 6: write safety — a write never runs on the agent's call. Its row rules are planned again
    // when it is approved, with the requester's roles, policies and attributes then (approvals/execute.ts);
    // the claim values of the attributes they read now are kept with it (a token is not there then).
    if (analysis.kind === 'write') {
      if (rows.kind === 'ruled') audit.row_rules = rows.plan.applied;
      // Nothing waits for an operator that the writer role cannot run (task hnu42a finding 3).
      const unwritable = await writerPrivilegeRefusal(connector, analysis, { signal: ctx.signal, identityId: identity.id });
      if (unwritable) {
        audit.writer_missing = unwritable.missing;
        return unwritable.outcome;
      }
      const hooks = (ctx as ToolCallContext & { auditHooks?: AuditHooks }).auditHooks;
      const queued = await writeSafetyStep(deps.store, { source, identity, requestId: ctx.requestId, sql, params, analysis, ...(rows.kind === 'ruled' ? { ruleAttributes: rows.plan.attributes } : {}) }, hooks && { hooks, details: audit });
      audit.approval_id = queued.kind === 'queued' ? queued.approvalId : undefined;
      return queued;
    }

    // Step 7: execution. At most two passes: the second after the guard's full check, or after a
    // row view the source lost was made again (once per call).
    if (rows.kind === 'ruled') audit.row_rules = rows.plan.applied;
    let remadeRowViews = false;
    // The functions and operators of every name it looks up, and the user functions it runs, must
    // still be the scanned ones (tasks hf5, hg1), and so must the columns of relations whose whole
    // rows it uses (task hrt42, rt42 G2: a column added since the scan would ride in a whole-row
    // value), and so must the definitions of the views it goes through (red team rt49 V1: a view
    // replaced since the scan would run a query the analysis never saw): checked in the read's own
    // round trip, right before the statement; a statement with none of these sends nothing more.
    // For a caller whose rules can refuse or mask something, the tables it reads must also still be
    // tables (rt49 R1: a table replaced by a view of its name would be read through an unseen query).
    const fnGuard = analysis.userFunctions || analysis.resolvedNames || analysis.rowShapes || analysis.typeUses || analysis.reads.length > 0 || analysis.functionReads ? (connector.functionGuard?.(catalog, analysis, analysis.rowShapes, { relationKinds: hierarchySensitive(evaluator, sourceId, policies, subject) }) ?? null) : null;
    for (;;) {
      const maxRows = Math.min(requested, sourceCap, restrictions.maxRows ?? Infinity);
      // Masked columns are masked in SQL, so their raw values never reach the gateway (mask-sql.ts).
      const plan = restrictions.redaction;
      const wrapped = plan && analysis.statement === 'SelectStmt' ? maskedStatement(sql, plan.columns) : null;
      if (wrapped && 'refused' in wrapped) return { kind: 'refusal', code: 'redaction_unprovable', message: wrapped.refused };
      const premasked = wrapped !== null && wrapped.sql !== sql;
      let runSql = premasked ? wrapped.sql : sql;
      let rowPlan: RowRulePlan | null = null;
      if (rows.kind === 'ruled') {
        const final = premasked ? bindRowRules(rowShape(runSql), identity.attributes, source.settings.trusted_functions) : rows;
        if (final.kind !== 'ruled') return final.kind === 'refused' ? final.outcome : { kind: 'refusal', code: 'row_rule_unenforceable' };
        rowPlan = final.plan;
        runSql = rowPlan.sql;
        if (!deps.rowViews || !(await deps.rowViews.ensure(source, rowPlan.views, catalog.scannedAt))) {
          // A relation a row view reads is gone from the source since the scan (its creation failed
          // 42P01; e.g. dropped with CASCADE): the agent is told so as for any relation gone (42P01,
          // no server text), and no statement runs again before a rescan (rtn4 item 2).
          if (deps.rowViews?.baseGone(source.id, rowPlan.views, catalog.scannedAt)) {
            deps.onRelationGone?.({ sourceId: source.id, requestId: ctx.requestId });
            return mapConnectorError({ sqlState: '42P01' }, sql);
          }
          return { kind: 'refusal', code: 'row_rules_unavailable' };
        }
      }
      let read;
      const readStarted = performance.now();
      try {
        // One literal of a fixed shape, absent options undefined (issue 28, h28l: no conditional
        // spreads copied into it per read; the connector reads each option by truthiness).
        read = await connector.read(runSql, params, {
          maxRows,
          maxBytes: deps.maxResultBytes ?? 4 * 1024 * 1024,
          signal: ctx.signal,
          identityId: identity.id,
          settings: rowPlan ? rowPlan.settings : undefined,
          guard: guard ?? undefined,
          functionGuard: fnGuard ?? undefined,
          poolWait: ctx.sourceWait ?? undefined,
          searchPath: catalog.searchPath,
          retryIfLost: analysis.userFunctions?.length ? false : undefined,
        });
      } catch (err) {
        const sqlState = (err as { sqlState?: string }).sqlState;
        // A row view dropped on the source since it was made (42P01, undefined table; e.g. by an
        // operator's schema change, docs/row-rules.md): made again and the read run once more in
        // this call. A second miss, with the views just made, is answered as any statement error.
        // A relation of the agent's own statement dropped since the scan (told by the error's
        // position, missingRelationIsRowView) is that statement error at once: no row-view
        // statement, no retry, no view forgotten (red team rtn4 item 2); the source's catalogue is
        // stale, which the gateway logs for the operator (onRelationGone).
        if (sqlState === '42P01') {
          if (rowPlan && missingRelationIsRowView(err, runSql)) {
            deps.rowViews?.forget(source.id);
            if (!remadeRowViews) {
              remadeRowViews = true;
              continue;
            }
          } else deps.onRelationGone?.({ sourceId: source.id, object: undefinedRelationObject(err), requestId: ctx.requestId });
        }
        if (sqlState === SQLSTATE_INSUFFICIENT_PRIVILEGE) {
          audit.sqlstate = sqlState;
          deps.onSourcePermissionDenied?.({ sourceId: source.id, object: permissionDeniedObject((err as { cause?: { message?: unknown } }).cause?.message), requestId: ctx.requestId });
        }
        // The agent's own text (not runSql, which may carry the mask projection or row-rule views):
        // a name an error reports is passed on only when the agent wrote it.
        const failed = mapConnectorError(err, sql);
        // The cause is the audit's too (issue 22 item 6): the reason, and the SQLSTATE it stands for.
        if (failed.kind === 'tool_error' && failed.reason) {
          audit.cause = failed.reason;
          audit.sqlstate = (err as { sqlState?: string }).sqlState;
        }
        return failed;
      } finally {
        if (ctx.sourceWait) ctx.sourceWait.ms += performance.now() - readStarted;
      }
      if (read.functionsChanged) {
        // A user function the analysis assumed is not the scanned one (task hf5): nothing ran.
        deps.onCatalogStale?.({ sourceId: source.id, requestId: ctx.requestId, reason: analysis.rowShapes ? (analysis.userFunctions ? 'catalog_changed' : 'columns_changed') : 'functions_changed' });
        return CATALOG_STALE;
      }
      if (read.searchPathChanged) {
        // The source's reader resolves names on another path than the scan recorded (task flake47): nothing ran.
        deps.onCatalogStale?.({ sourceId: source.id, requestId: ctx.requestId, reason: 'search_path_changed' });
        return CATALOG_STALE;
      }
      if (read.guardTripped) {
        // Some relation may now sit in a tree: the statement did not run. Decide on the live tree, read again.
        const refused = await recheck();
        if (refused) return refused;
        continue;
      }

      // Step 8: redaction (before caching, logging and audit).
      const red = redactRows(read, analysis, restrictions, deps.maskSecret, premasked);
      if (!red.ok) return red.outcome;
      // Stored only when the live tree was the catalogue's (the key was built on the decisions made on it).
      if (key && hier.ok && !hier.changed) deps.cache.set(key, { rows: red.rows, truncated: read.truncated, truncatedBy: read.truncatedBy, maskedColumns: red.maskedColumns });
      audit.row_count = red.rows.length;
      audit.cached = false;
      return queryResult(red.rows, read.truncated, false, red.maskedColumns, read.truncatedBy);
    }
  };
}

/**
 * The caller's access for the result-cache key: sha-256 (base64url, 43 characters) of the JSON text
 * of its role statements on the source, its policy restrictions' fingerprint (row cap, masks) and
 * whether the live hierarchy check applies to it (`checked`: hierarchySensitive — a deny, row rule,
 * or a mask/deny/restrict_rows policy selecting it). The last is needed because an unchecked
 * caller's read stores whatever the server's tree held, a partition attached since the scan
 * included, and a hit is served without the check (issue 28): a checked caller with the same roles
 * must never compute that key (red team rtc, RTC-1/RTC-2). Computed once per cached policy verdict
 * (AnalysisCache `policy`), so a cache key's text is ~200 characters instead of the ~1 KB of those
 * statements escaped inside it on every call (issue 28 item 3).
 */
export function accessFingerprintOf(statements: unknown, restrictionsFingerprint: string, checked: boolean): string {
  return createHash('sha256').update(JSON.stringify([statements, restrictionsFingerprint, checked])).digest('base64url');
}

/**
 * The result-cache key of a read (issue 28): ResultCache.key over the read's parts, with the catalogue
 * snapshot and the active policies bound by content (contentFingerprint, memoised per object) beside
 * the caller's access fingerprint (its role statements, the policy restrictions — row cap, masks —
 * and, for a ruled caller, the bound row-rule values). A rescan (a new snapshot: its `scannedAt`
 * differs) or any policy change therefore never reaches an entry stored before it, on any replica,
 * even though cache hits are served without the live hierarchy check.
 */
export function cacheKey(cache: ResultCache, parts: { sourceId: string; sql: string; params: unknown[]; maxRows: number; accessFingerprint: string }, catalog: SourceCatalog, policies: Policy[]): string {
  return cache.key({ ...parts, accessFingerprint: `${parts.accessFingerprint}\u0000catalog:${contentFingerprint(catalog)}\u0000policies:${contentFingerprint(policies)}` });
}

/** A read refused because a user function it runs, or the reader's lookup path, changed since the scan (tasks hf5, flake47; spec/errors-v1.json `catalog_stale`). */
const CATALOG_STALE: ToolOutcome = { kind: 'refusal', code: 'catalog_stale' };

/** The row-rule shape of every statement of a caller without row rules on the source. */
const NO_ROW_RULES: RowRuleShape = { kind: 'none' };

/**
 * A caller with row rules reading a table whose partition or inheritance tree changed since the scan:
 * the rewrite was planned on the catalogue's tree and could miss a parent's rule (issue 27).
 */
const STALE_TREE_REFUSAL: ToolOutcome = { kind: 'refusal', code: 'row_rule_unenforceable', message: 'A table this statement reads joined or left a partition or inheritance tree after the source was last scanned, so its row rules cannot be proven; an operator can rescan the source.' };

/**
 * Step 3 uncached: parse and analyse `sql` against the catalog within the source's complexity limits
 * (issue 10 item 3), then authorize every relation and column it touches.
 */
export function authorizeSql(evaluator: AccessEvaluator, sourceId: string, sql: string, catalog: SourceCatalog, complexity?: ComplexityLimits): CachedAnalysis {
  const analysis = analyzeSql(sql, catalog, complexity ? { complexity } : {});
  if (!analysis.ok) return { analysis, relations: [], denied: analysisRefusal(analysis, sql, evaluator.hasReadDeny(sourceId)) };
  // What the user functions it runs may read is recorded too (task hfn).
  const relations = [...new Set([...analysis.reads, ...analysis.writes, ...(analysis.functionReads ?? []).flatMap((f) => f.relations)].map((r) => `${r.schema}.${r.table}`))].sort();
  return { analysis, relations, denied: authorizeStatement(evaluator, sourceId, analysis, catalog, undefined, sql) };
}


/**
 * The interlock_query success result (contract: interlock_query; issue 23 item 4): the first text
 * item is the JSON array of row objects; structuredContent is {rows, row_count, truncated, cached,
 * truncated_by?, masked_columns?}. When rows were cut, a second text item says so, why and how many
 * rows were returned (truncationText), so a client that shows only text never presents a cut
 * result as complete; `truncated_by` is `max_rows` or `max_bytes` when the reader said which.
 */
export function queryResult(rows: Record<string, unknown>[], truncated: boolean, cached: boolean, maskedColumns: string[], truncatedBy?: TruncatedBy | null): ToolOutcome {
  const sc: Record<string, unknown> = { rows, row_count: rows.length, truncated, cached };
  if (truncated && truncatedBy) sc.truncated_by = truncatedBy;
  if (maskedColumns.length) sc.masked_columns = maskedColumns;
  const content = [{ type: 'text' as const, text: rowsText(rows) }];
  if (truncated) content.push({ type: 'text', text: truncationText(rows.length, truncatedBy) });
  return { kind: 'result', content, structuredContent: sc };
}

/** The second text item of a truncated interlock_query result: that it was cut, why, and how many rows it holds. */
export function truncationText(rowCount: number, by?: TruncatedBy | null): string {
  const why =
    by === 'max_rows' ? 'more rows matched than the row limit (max_rows, or a source or policy row cap)'
    : by === 'max_bytes' ? "the rows would have exceeded the result's size limit"
    : 'a row or size limit was reached';
  return `TRUNCATED: this result is incomplete: ${why}. ${rowCount} row${rowCount === 1 ? '' : 's'} returned. Narrow the query (WHERE, fewer columns) or page with ORDER BY and LIMIT/OFFSET to see the rest.`;
}

/** For pool-typed deps in other modules. */
export type { Pool };
