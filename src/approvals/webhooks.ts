/**
 * Approval notifications by webhook (issue 14, item 2; config `notifications.webhooks`,
 * spec/config-v1.schema.json). The gateway follows the approval audit trail (kind approval), so
 * every approval action is seen whichever process made it (an agent's call on any replica, the
 * CLI, the admin API, the console), and POSTs one JSON body per subscribed event:
 *
 *   approval.queued    a write waits for an operator     (audit decision queued)
 *   approval.decided   approved, rejected or expired     (approved | rejected | expired)
 *   approval.expired   the sweeper expired it undecided  (expired; sent instead of approval.decided
 *                      to a webhook that subscribes to it)
 *   approval.executed  ran once, with the row count      (executed)
 *   approval.failed    did not complete, with the code   (failed)
 *
 * Body: {id, event, time, approval: {id, state, source_id, identity, operator, row_count,
 * error_code, reason, statement}, text}; `state` is the approval's state as of the event
 * (approval.decided: approved, rejected or expired, row_count null; executed and failed follow as
 * their own events); `text` is one readable line for chat tools that accept
 * incoming webhooks, with every agent-written part made inert for chat markup (chatText: no mention
 * or link can be formed, the statement in a code block; issue 24 item 5). No database error text is
 * sent (the cause stays in the console and CLI). When `coalesceQueuedAt` or more approval.queued
 * events of one identity arrive in one poll, each webhook gets one delivery for them all, with
 * `coalesced: {count, approval_ids}` (the other events' rows are recorded with status coalesced).
 * Headers: X-InterLock-Event, X-InterLock-Delivery, X-InterLock-Timestamp (Unix seconds) and
 * X-InterLock-Signature: sha256=hex(HMAC-SHA-256(secret, timestamp + "." + body)), the secret read
 * from the environment variable `secret_env`. A webhook whose variable is unset is skipped (logged).
 *
 * Delivery: a 2xx answer is delivered; anything else (or no answer in 10 s) is retried with
 * exponential backoff (default 0.5 s, 1 s, 2 s, 4 s: five attempts), then marked failed. Every
 * attempt is recorded in webhook_deliveries, whose unique (webhook, event) row is also the claim
 * that keeps replicas from sending an event twice. History before the gateway started is not sent.
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type { ControlDb } from '../control/db';
import { getApproval } from '../control/approvals';
import { hasRightToLeft, initStatementDisplay, showInvisible, statementForDisplay } from './statement';
import { webhookSecretProblem } from '../control/config';

/** The events a webhook can subscribe to. */
export const WEBHOOK_EVENTS = ['approval.queued', 'approval.decided', 'approval.expired', 'approval.executed', 'approval.failed'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

/** One configured webhook (config notifications.webhooks[]). */
export interface WebhookConfig {
  url: string;
  events: string[];
  secret_env: string;
}

/** The event of an approval audit decision, or null for decisions that are not notified. */
export function eventFor(decision: string): WebhookEvent | null {
  switch (decision) {
    case 'queued':
      return 'approval.queued';
    case 'approved':
    case 'rejected':
    case 'expired':
      return 'approval.decided';
    case 'executed':
      return 'approval.executed';
    case 'failed':
      return 'approval.failed';
    default:
      return null;
  }
}

/**
 * The approval's state as of the audit `decision` an event reports (task hnu4b item f): queued is
 * pending, every other action is the state it names (approved, rejected, expired, executed,
 * failed). Never the approval's state when the poll reads it, which may be later: a CLI approval
 * has executed by then, so its approval.decided would say executed where a console one says approved.
 */
export function stateAtEvent(decision: string): string {
  return decision === 'queued' ? 'pending' : decision;
}

/**
 * The event a webhook subscribed to `events` receives for an approval audit `decision`, or null:
 * an expiry is approval.expired for a webhook that asks for it, else approval.decided.
 */
export function eventForHook(decision: string, events: readonly string[]): WebhookEvent | null {
  const e = decision === 'expired' && events.includes('approval.expired') ? 'approval.expired' : eventFor(decision);
  return e !== null && events.includes(e) ? e : null;
}

/**
 * `text` made inert for chat markup (Slack mrkdwn, Discord and Teams markdown; issue 24 item 5):
 * invisible characters shown as ⟨U+XXXX⟩, `&`, `<`, `>` as entities (no `<!channel>`, `<@U1>` or
 * `<url|label>` can form), `@` as the fullwidth ＠ (no @here, @everyone or @name mention), and
 * backticks as ˋ so the text cannot leave a code block.
 */
export function chatText(text: string): string {
  return showInvisible(text).text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/@/g, '＠').replace(/`/g, 'ˋ');
}

/** A statement for chat: chatText in a code block, so no formatting applies to it. */
function chatCode(statement: string): string {
  return '```' + chatText(statement) + '```';
}

/**
 * A webhook's URL as logs name it (red team rt48a K5): its origin and first path segment, the rest
 * as `…`, no query. Incoming-webhook URLs of chat tools carry their credential in the path
 * (`/services/T…/B…/<secret>`, `/api/webhooks/<id>/<token>`) or the query, so the whole URL is never
 * logged; webhook_deliveries (operators only) keeps it whole. An unparseable URL is `<webhook URL>`.
 */
export function webhookUrlForLog(url: string): string {
  try {
    const u = new URL(url);
    const segments = u.pathname.split('/').filter(Boolean);
    return `${u.origin}${segments.length === 0 ? '/' : `/${segments[0]}${segments.length > 1 || u.search ? '/…' : ''}`}`;
  } catch {
    return '<webhook URL>';
  }
}

/** The signature header value of `body` sent at `timestamp` (Unix seconds). */
export function signWebhook(secret: string, timestamp: number, body: string): string {
  return 'sha256=' + crypto.createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
}

/** True when `signature` is the signature of `body` at `timestamp` (constant time); for receivers and tests. */
export function verifyWebhook(secret: string, timestamp: string | number, body: string, signature: string | undefined): boolean {
  if (typeof signature !== 'string') return false;
  const want = Buffer.from(signWebhook(secret, Number(timestamp), body));
  const got = Buffer.from(signature);
  return want.length === got.length && crypto.timingSafeEqual(want, got);
}

/** The approval as a webhook payload describes it. */
export interface WebhookApproval {
  id: string;
  state: string;
  source_id: string;
  identity: string;
  operator: string | null;
  row_count: number | null;
  error_code: string | null;
  reason: string | null;
  statement: string;
}

/** One readable line for chat tools; every interpolated value goes through chatText, the statement in a code block. */
export function webhookText(event: WebhookEvent, decision: string, a: WebhookApproval): string {
  const who = `${chatText(a.identity)} on ${chatText(a.source_id)}`;
  const id = chatText(a.id);
  switch (event) {
    case 'approval.queued':
      // A chat client lays out right-to-left letters bidirectionally: digits between them may be drawn out of order (rt48a K7).
      return `A write by ${who} is waiting for approval (${id}): ${chatCode(a.statement)}${hasRightToLeft(a.statement) ? ' (right-to-left letters in it: a chat client may draw the digits between them out of order; check it in the console)' : ''}`;
    case 'approval.expired':
      return `Approval ${id} (${who}) expired undecided.`;
    case 'approval.decided':
      return decision === 'expired' ? `Approval ${id} (${who}) expired undecided.` : `Approval ${id} (${who}) was ${chatText(decision)} by ${a.operator ? chatText(a.operator) : 'an operator'}${a.reason ? `: ${chatText(a.reason)}` : ''}.`;
    case 'approval.executed':
      return `Approval ${id} (${who}) executed: ${a.row_count ?? 0} row(s) changed.`;
    case 'approval.failed':
      return `Approval ${id} (${who}) failed: ${chatText(a.error_code ?? 'execution_failed')}. See the console or interlock approval show ${id} for the cause.`;
  }
}

/** The text of one delivery for `ids` (≥ 2) writes of one identity queued at once. */
export function coalescedText(identity: string, ids: string[]): string {
  return `${ids.length} writes by ${chatText(identity)} are waiting for approval: ${ids.map(chatText).join(', ')}. Open the console to review them.`;
}

/** Options of startWebhookDispatcher. */
export interface WebhookDispatcherOptions {
  db: ControlDb;
  webhooks: WebhookConfig[];
  logger?: Logger;
  env?: NodeJS.ProcessEnv;
  /** How often the audit trail is read, in ms (default 500). */
  pollMs?: number;
  /** Delays before retries 2, 3, … in ms (default [500, 1000, 2000, 4000]: five attempts). */
  backoffMs?: number[];
  /** Per-attempt timeout in ms (default 10 000). */
  timeoutMs?: number;
  /** Queued events of one identity in one poll from which one coalesced delivery is sent (default 3; config notifications.coalesce_queued_at). */
  coalesceQueuedAt?: number;
}

/** A running dispatcher. */
export interface WebhookDispatcher {
  /** Stops polling and waits for deliveries in flight. */
  close(): Promise<void>;
}

interface AuditRow {
  id: string;
  time: Date;
  decision: string;
  approval_id: string;
  operator: string | null;
  reason_code: string | null;
  row_count: string | null;
  details: Record<string, unknown>;
}

/** Starts following the approval audit trail and delivering to `webhooks`. With no usable webhook it does nothing. */
export async function startWebhookDispatcher(opts: WebhookDispatcherOptions): Promise<WebhookDispatcher> {
  const env = opts.env ?? process.env;
  const hooks = opts.webhooks.flatMap((w) => {
    const secret = env[w.secret_env];
    if (!secret) {
      opts.logger?.warn({ component: 'webhooks', url: webhookUrlForLog(w.url), secret_env: w.secret_env }, 'webhook skipped: its secret_env variable is not set');
      return [];
    }
    // loadConfig refuses a weak secret; a configuration built otherwise never signs with one (task hnu43 item 6).
    const weak = webhookSecretProblem(w.secret_env, secret);
    if (weak) {
      opts.logger?.error({ component: 'webhooks', url: webhookUrlForLog(w.url), secret_env: w.secret_env }, `webhook skipped: ${weak}`);
      return [];
    }
    return [{ ...w, secret }];
  });
  if (hooks.length === 0) return { close: async () => undefined };
  const backoff = opts.backoffMs ?? [500, 1000, 2000, 4000];
  const inflight = new Set<Promise<void>>();
  let stopped = false;
  let cursor = (await opts.db.pool.query<{ m: string }>("SELECT coalesce(max(id), 0)::text AS m FROM audit_events")).rows[0].m;
  await initStatementDisplay();

  const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

  const deliver = async (hook: (typeof hooks)[number], deliveryId: string, event: WebhookEvent, body: string) => {
    for (let attempt = 1; ; attempt++) {
      const ts = Math.floor(Date.now() / 1000);
      let status: number | null = null;
      let error: string | null = null;
      try {
        const r = await fetch(hook.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'user-agent': 'InterLock-Webhook/1', 'x-interlock-event': event, 'x-interlock-delivery': deliveryId, 'x-interlock-timestamp': String(ts), 'x-interlock-signature': signWebhook(hook.secret, ts, body) },
          body,
          signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
          redirect: 'manual',
        });
        status = r.status;
        await r.arrayBuffer().catch(() => undefined);
      } catch (err) {
        error = (err as Error).name === 'TimeoutError' ? 'timeout' : 'connection failed';
      }
      const ok = status !== null && status >= 200 && status < 300;
      const last = ok || attempt > backoff.length || stopped;
      await opts.db.pool
        .query('UPDATE webhook_deliveries SET attempts = $2, last_status = $3, last_error = $4, status = $5, finished_at = CASE WHEN $5 = \'sending\' THEN NULL ELSE now() END WHERE id = $1', [deliveryId, attempt, status, ok ? null : (error ?? `HTTP ${status}`), ok ? 'delivered' : last ? 'failed' : 'sending'])
        .catch(() => undefined);
      if (ok) return;
      if (last) {
        opts.logger?.warn({ component: 'webhooks', url: webhookUrlForLog(hook.url), event, deliveryId, status, error }, 'webhook delivery failed after retries');
        return;
      }
      await sleep(backoff[attempt - 1]);
    }
  };

  const coalesceAt = Math.max(2, opts.coalesceQueuedAt ?? 3);
  /** Claims (webhook, audit event): the row is this replica's to send; null when another replica has it. */
  const claim = async (hook: (typeof hooks)[number], eventId: string, event: WebhookEvent, approvalId: string) =>
    (
      await opts.db.pool.query<{ id: string }>(
        'INSERT INTO webhook_deliveries (webhook, event_id, event, approval_id) VALUES ($1, $2, $3, $4) ON CONFLICT (webhook, event_id) DO NOTHING RETURNING id::text',
        [hook.url, eventId, event, approvalId],
      )
    ).rows[0]?.id ?? null;
  const send = (hook: (typeof hooks)[number], deliveryId: string, event: WebhookEvent, body: Record<string, unknown>) => {
    const p = deliver(hook, deliveryId, event, JSON.stringify({ id: deliveryId, ...body })).finally(() => inflight.delete(p));
    inflight.add(p);
  };

  const poll = async () => {
    // ORDER BY the bigint column (audit_events.id): the output column `id` is text, and text order ('10' < '9') would move the cursor past events.
    const r = await opts.db.pool.query<AuditRow>(
      `SELECT id::text, time, decision, approval_id, operator, reason_code, row_count::text, details FROM audit_events
       WHERE id > $1 AND kind = 'approval' AND approval_id IS NOT NULL ORDER BY audit_events.id LIMIT 200`,
      [cursor],
    );
    // One poll's deliveries: queued events per (webhook, identity) wait until the whole page is read, to be coalesced.
    const queued = new Map<string, { hook: (typeof hooks)[number]; identity: string; items: Array<{ row: AuditRow; approval: WebhookApproval }> }>();
    for (const row of r.rows) {
      cursor = row.id;
      const targets = hooks.flatMap((h) => {
        const event = eventForHook(row.decision, h.events);
        return event ? [{ hook: h, event }] : [];
      });
      if (targets.length === 0) continue;
      const a = await getApproval(opts.db, row.approval_id);
      if (!a) continue;
      const approval: WebhookApproval = {
        id: a.id,
        state: stateAtEvent(row.decision),
        source_id: a.sourceId,
        identity: a.identityName,
        operator: row.operator,
        row_count: row.row_count === null ? null : Number(row.row_count),
        error_code: row.reason_code,
        reason: typeof row.details?.reason === 'string' ? row.details.reason : null,
        statement: statementForDisplay(a.sql, 200).text,
      };
      for (const { hook, event } of targets) {
        if (event === 'approval.queued') {
          const key = `${hook.url}\u0000${a.identityId}`;
          const group = queued.get(key) ?? { hook, identity: a.identityName, items: [] };
          group.items.push({ row, approval });
          queued.set(key, group);
          continue;
        }
        const deliveryId = await claim(hook, row.id, event, a.id);
        if (deliveryId === null) continue; // another replica has it
        send(hook, deliveryId, event, { event, time: new Date(row.time).toISOString(), approval, text: webhookText(event, row.decision, approval) });
      }
    }
    for (const { hook, identity, items } of queued.values()) {
      const mine: Array<{ deliveryId: string; row: AuditRow; approval: WebhookApproval }> = [];
      for (const it of items) {
        const deliveryId = await claim(hook, it.row.id, 'approval.queued', it.approval.id);
        if (deliveryId !== null) mine.push({ deliveryId, ...it });
      }
      if (mine.length >= coalesceAt) {
        const [first, ...rest] = mine;
        const ids = mine.map((m) => m.approval.id);
        await opts.db.pool.query("UPDATE webhook_deliveries SET status = 'coalesced', finished_at = now() WHERE id = ANY($1::bigint[])", [rest.map((m) => m.deliveryId)]);
        send(hook, first.deliveryId, 'approval.queued', { event: 'approval.queued', time: new Date(first.row.time).toISOString(), approval: first.approval, coalesced: { count: ids.length, approval_ids: ids }, text: coalescedText(identity, ids) });
      } else {
        for (const m of mine) send(hook, m.deliveryId, 'approval.queued', { event: 'approval.queued', time: new Date(m.row.time).toISOString(), approval: m.approval, text: webhookText('approval.queued', m.row.decision, m.approval) });
      }
    }
  };

  let running: Promise<void> | null = null;
  const timer = setInterval(() => {
    if (stopped || running) return;
    running = poll()
      .catch((err) => opts.logger?.warn({ component: 'webhooks', err: String(err) }, 'webhook poll failed'))
      .finally(() => {
        running = null;
      });
  }, opts.pollMs ?? 500);
  timer.unref();
  return {
    async close() {
      stopped = true;
      clearInterval(timer);
      await running;
      await Promise.allSettled([...inflight]);
    },
  };
}
