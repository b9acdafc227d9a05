/**
 * What the SQL analyser assumes about how PostgreSQL reads a statement's text (issue 22, item 2).
 *
 * libpg-query always lexes as PostgreSQL's defaults: `standard_conforming_strings = on` (a backslash
 * in `'…'` is an ordinary character), `backslash_quote = safe_encoding`, and UTF-8 text. If the server
 * that runs a statement lexes it otherwise, text the analyser read as a constant can run as SQL
 * (a sub-select, `; COMMIT; DELETE …`). The gateway therefore pins these settings on every source
 * connection and verifies them after connect (src/sources/postgres/pinned-client.ts); a source that
 * does not hold them is `unavailable` (`session_settings_mismatch`).
 *
 * The list itself lives in src/sources/postgres/session-settings.ts (one list for the connection
 * code, the analyser and the value decoder); this module is the analyser's view of it.
 */
import { PINNED_SESSION_SETTINGS, type PinnedSetting } from '../sources/postgres/session-settings';

/** The pinned settings the analyser's lexing depends on (family `lexer`), in the order they are sent. */
export const LEXER_ASSUMPTIONS: readonly PinnedSetting[] = PINNED_SESSION_SETTINGS.filter((s) => s.family === 'lexer');
