/**
 * The audit key's tag on a queued write's tool-call event (red team rt46b G1). A queued write's
 * tool-call event is stored with its approval event on the format-2 chain (queueApproval,
 * src/control/approvals.ts, through interlock_audit_append_v2), which the runtime role may append to
 * as well; its batch hash is unkeyed. A gateway with an audit key therefore tags the event itself:
 *
 *   details.audit_tag = { key_id, tag }, tag = hex HMAC-SHA-256(key, UTF8("interlock-audit-call-tag-v1\n" ‖ key_id ‖ "\n" ‖ eventsText([row])))
 *
 * where row is the normalised event (event-text.ts) without details.audit_tag, so the tag covers every
 * column of the event (kind, time, request, identity, decision, approval id, statement fingerprint,
 * details …) but not its batch. On a keyed trail, verify given the keys names a format-2 batch holding a
 * tool-call event without a valid tag (`unkeyed_batch`, src/audit/verify.ts), and a second event
 * carrying a tag already verified (a copy of a genuine one stored again) `inserted_batch`. A tag under a
 * retired key id in a batch stored after the retirement is `retired_key` (task ret47), valid or not.
 * docs/operators.md ("The audit key").
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { eventsText, normalizeAuditRow } from './event-text';
import type { AuditKey } from './key';
import type { AuditRowInput } from './types';

/** The details field that holds the tag: an object { key_id: 16 hex digits, tag: 64 hex digits }. */
export const CALL_TAG_FIELD = 'audit_tag';

/** The tag (64 lowercase hex digits) of normalised row `row` under `key`; details.audit_tag, if any, is left out. */
export function callTag(key: AuditKey, row: AuditRowInput): string {
  const details = { ...(row.details ?? {}) } as Record<string, unknown>;
  delete details[CALL_TAG_FIELD];
  const text = eventsText([{ ...row, details }]);
  return createHmac('sha256', key.secret).update(`interlock-audit-call-tag-v1\n${key.id}\n${text}`, 'utf8').digest('hex');
}

/** `row` normalised (normalizeAuditRow, the time fixed now) with details.audit_tag set under `key`: what queueApproval appends. */
export function tagCallRow(key: AuditKey, row: AuditRowInput): AuditRowInput {
  const n = normalizeAuditRow(row);
  const details = { ...(n.details ?? {}) } as Record<string, unknown>;
  delete details[CALL_TAG_FIELD];
  const bare = { ...n, details };
  return { ...bare, details: { ...details, [CALL_TAG_FIELD]: { key_id: key.id, tag: callTag(key, bare) } } };
}

/** Whether stored row `row` (rowFromStored) carries a tag valid under the key of `keys` its key_id names; false for none, a malformed one, or an unknown key id. */
export function callTagValid(keys: ReadonlyMap<string, AuditKey>, row: AuditRowInput | null): boolean {
  const t = (row?.details as Record<string, unknown> | undefined)?.[CALL_TAG_FIELD] as { key_id?: unknown; tag?: unknown } | undefined;
  if (!row || !t || typeof t !== 'object' || typeof t.key_id !== 'string' || typeof t.tag !== 'string' || !/^[0-9a-f]{64}$/.test(t.tag)) return false;
  const key = keys.get(t.key_id);
  if (!key) return false;
  return timingSafeEqual(Buffer.from(callTag(key, row), 'hex'), Buffer.from(t.tag, 'hex'));
}
