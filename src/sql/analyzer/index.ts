/**
 * The SQL walker's one public entry point (issue 25, item 1; the family files are listed in
 * README.md beside this file). `analyzeSql` (../analyze.ts) is its only caller in src/:
 *
 *   const st = createWalkState(preparedCatalog, budget);
 *   const outs = analyzeStatement(st, 'SelectStmt', body);   // throws Refusal when refused
 *   st.reads, st.writes, st.functions, st.filter, st.nonOutput, … ; workUsed(st)
 */
export { Refusal } from './nodes';
export { WORK_BUDGET, workUsed } from './state';
export { typeCodeRuns, typeUses, viewUserFunctions } from './uses';
export type { OutCol, QueryOut, WalkState } from './state';
export { analyzeStatement, createWalkState, statementName } from './stmt';
