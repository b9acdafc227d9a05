/**
 * SQL analysis layer: parse, classify, resolve and trace agent SQL (sql-safety.md layers 1–3 and
 * class 6). See `analyze.ts` for the rules and `redaction.ts` for masking.
 */
export * from './analyze';
export * from './catalog-types';
export * from './redaction';
export { deniedFunctionReason, HARMLESS_VOLATILE, SAFE_SETTINGS } from './function-policy';
