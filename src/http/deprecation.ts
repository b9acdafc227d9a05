/**
 * Deprecation signalling of the custom routes /mcp/tools/list, /mcp/tools/call and /mcp/sse
 * (contract: Legacy Compatibility — deprecated, earliest removal 1.2.0 under the one-minor-release
 * policy). Every response on them carries:
 *  - `Deprecation: @1795910400` (RFC 9745: deprecated since 2026-11-29T00:00:00Z, the 1.0.0 line);
 *  - `Sunset: Thu, 01 Jul 2027 00:00:00 GMT` (RFC 8594): the routes stay at least until this date
 *    AND at least until release 1.2.0, whichever comes later; they are removed no earlier than both;
 *  - `Link: </mcp>; rel="successor-version"`: POST /mcp (initialize-negotiated handshake dialect)
 *    serves every client of these routes.
 * spec/openapi-v1.yaml declares the same values as `const` header schemas, and the tests validate
 * every response against it, so the values here and there cannot drift.
 */
import type { Response } from 'express';

/** RFC 9745 Deprecation value: the route is deprecated since 2026-11-29 (1.0.0). */
export const DEPRECATION = '@1795910400';
/** RFC 8594 Sunset value: not removed before this date, nor before release 1.2.0. */
export const SUNSET = 'Thu, 01 Jul 2027 00:00:00 GMT';
/** The successor link. */
export const SUCCESSOR_LINK = '</mcp>; rel="successor-version"';
/** Earliest release that may remove the routes (contract). */
export const EARLIEST_REMOVAL = '1.2.0';

/** The three deprecation headers, by name. */
export const DEPRECATION_HEADERS: Readonly<Record<string, string>> = Object.freeze({ Deprecation: DEPRECATION, Sunset: SUNSET, Link: SUCCESSOR_LINK });

/** Sets the deprecation headers on `res` (before anything is written). */
export function setDeprecationHeaders(res: Response): void {
  res.set(DEPRECATION_HEADERS);
}
