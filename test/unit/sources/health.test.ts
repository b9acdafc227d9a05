/**
 * The breaker's health classifier (issue 10, Build 4): which SQLSTATEs say the source is unhealthy
 * and which the agent's own statement caused. Pure; no database.
 */
import { isLocalWireError, serverErrorCountsAgainstSource } from '../../../src/sources/postgres/health';

describe('serverErrorCountsAgainstSource', () => {
  test.each([
    ['08000', 'connection_exception'],
    ['08003', 'connection_does_not_exist'],
    ['08006', 'connection_failure'],
    ['08P01', 'protocol_violation'],
    ['57000', 'operator_intervention'],
    ['57P01', 'admin_shutdown'],
    ['57P02', 'crash_shutdown'],
    ['57P03', 'cannot_connect_now'],
    ['57P04', 'database_dropped'],
    ['58000', 'system_error'],
    ['58030', 'io_error'],
    ['F0000', 'config_file_error'],
    ['XX001', 'data_corrupted'],
    ['XX002', 'index_corrupted'],
    ['28P01', 'invalid_password'],
    ['3D000', 'invalid_catalog_name'],
  ])('%s (%s) counts against the source', (code) => {
    expect(serverErrorCountsAgainstSource(code, 'ERROR')).toBe(true);
  });

  test.each([
    ['22P02', 'invalid_text_representation'],
    ['22003', 'numeric_value_out_of_range'],
    ['22012', 'division_by_zero'],
    ['2202E', 'array_subscript_error'],
    ['42601', 'syntax_error'],
    ['42P01', 'undefined_table'],
    ['42883', 'undefined_function'],
    ['42501', 'insufficient_privilege'],
    ['0A000', 'feature_not_supported'],
    ['XX000', 'internal_error (array_in with odd arguments)'],
    ['54000', 'program_limit_exceeded'],
    ['54001', 'statement_too_complex'],
    ['2BP01', 'dependent_objects_still_exist'],
    ['40001', 'serialization_failure'],
    ['40P01', 'deadlock_detected'],
    ['25006', 'read_only_sql_transaction'],
    ['55P03', 'lock_not_available'],
    ['57014', 'query_canceled'],
    ['53400', 'configuration_limit_exceeded (temp_file_limit)'],
    ['53000', 'insufficient_resources (rt49b D2: a running statement\'s)'],
    ['53100', 'disk_full (a statement\'s temporary files)'],
    ['53200', 'out_of_memory ("out of shared memory": a read of thousands of partitions fills the lock table)'],
    ['23505', 'unique_violation'],
    ['21000', 'cardinality_violation'],
  ])('%s (%s) is the statement\'s own and does not count', (code) => {
    expect(serverErrorCountsAgainstSource(code, 'ERROR')).toBe(false);
  });

  test('FATAL and PANIC count whatever the class; lower-case SQLSTATEs are read like upper-case', () => {
    expect(serverErrorCountsAgainstSource('42501', 'FATAL')).toBe(true);
    expect(serverErrorCountsAgainstSource('22P02', 'PANIC')).toBe(true);
    expect(serverErrorCountsAgainstSource('57p01')).toBe(true);
    expect(serverErrorCountsAgainstSource('xx000')).toBe(false);
    // Class 53 counts as FATAL (53300 too_many_connections is raised so, while connecting).
    expect(serverErrorCountsAgainstSource('53300', 'FATAL')).toBe(true);
  });

  test('the gateway\'s own wire errors are recognised by code only', () => {
    expect(isLocalWireError(Object.assign(new Error('x'), { code: 'EINTERLOCK_WIRE' }))).toBe(true);
    expect(isLocalWireError(Object.assign(new Error('x'), { code: 'ECONNRESET' }))).toBe(false);
    expect(isLocalWireError(null)).toBe(false);
  });
});
