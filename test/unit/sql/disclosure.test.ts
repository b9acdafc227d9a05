/**
 * V4 (existence and shape of relations), V5 (connection details) and the lexer divergence between
 * the parser (PostgreSQL 18 grammar) and PostgreSQL 15 (red-team findings).
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import { deniedFunctionReason, deniedSettingReason, deniedTypeReason, deniedValueFunctionReason } from '../../../src/sql/function-policy';
import { CATALOG, ok, readMap, refused } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const ALL_EMPLOYEE = ['employee_id', 'last_name', 'first_name', 'title', 'reports_to', 'birth_date', 'hire_date', 'address', 'city', 'state', 'country', 'postal_code', 'phone', 'fax', 'email'];

describe('V4: existence, shape and privileges of objects', () => {
  test.each([
    "SELECT to_regclass('public.customer') AS r",
    "SELECT to_regtype('employee')",
    "SELECT to_regproc('sidefx')",
    "SELECT to_regnamespace('s')",
    "SELECT to_regrole('postgres')",
    "SELECT has_table_privilege('employee', 'SELECT') AS p",
    "SELECT has_column_privilege('employee', 'birth_date', 'SELECT')",
    "SELECT has_schema_privilege('public', 'USAGE')",
    "SELECT pg_has_role('postgres', 'MEMBER')",
    'SELECT pg_table_is_visible(1259)',
    'SELECT pg_type_is_visible(23)',
    'SELECT format_type(23, NULL)',
    "SELECT pg_relation_size('employee')",
    "SELECT pg_total_relation_size('employee')",
    "SELECT pg_input_is_valid('(1)', 'employee')",
    "SELECT row_security_active('employee')",
    'SELECT pg_get_userbyid(10)',
    'SELECT obj_description(1259)',
    "SELECT acldefault('r', 10)",
    'SELECT pg_catalog.to_regclass($1)',
    'SELECT "to_regclass"(\'x\')',
  ])('%s is refused as function_not_allowed', (sql) => {
    expect(refused(sql).code).toBe('function_not_allowed');
  });

  test.each([
    "SELECT 'employee'::regclass::oid AS o",
    "SELECT CAST('employee' AS regclass)",
    "SELECT 'employee'::pg_catalog.regclass",
    "SELECT 'int4'::regtype",
    "SELECT 'now'::regproc",
    "SELECT 'now()'::regprocedure",
    "SELECT '+'::regoper",
    "SELECT '+(int4,int4)'::regoperator",
    "SELECT 'public'::regnamespace",
    "SELECT 'postgres'::regrole",
    "SELECT 'C'::regcollation",
    "SELECT 'english'::regconfig",
    "SELECT 'simple'::regdictionary",
    "SELECT '{employee}'::regclass[]",
    "SELECT 'postgres=r/postgres'::aclitem",
    "SELECT x::regclass FROM (VALUES ('employee')) v(x)",
  ])('cast to an object-identifier type %s is refused', (sql) => {
    const r = refused(sql);
    expect(r.code).toBe('function_not_allowed');
    expect(r.message).toMatch(/system catalogues/);
  });

  test.each([
    ['SELECT * FROM CAST(NULL AS employee) AS x', 'employee'],
    ["SELECT to_jsonb(jsonb_populate_record(NULL::customer, '{}')) AS cols", 'customer'],
    ["SELECT * FROM json_populate_recordset(NULL::public.employee, '[]')", 'employee'],
    ['SELECT NULL::employee', 'employee'],
    ['SELECT NULL::employee[]', 'employee'],
    ["SELECT '(1,x,y)'::employee", 'employee'],
    ['SELECT ROW(1)::employee', 'employee'],
    ["SELECT * FROM jsonb_to_record('{}') AS x(a employee)", 'employee'],
  ])('the row type of a relation used as a type reads all its columns: %s', (sql, table) => {
    const r = ok(sql);
    expect(readMap(r)[table]).toEqual(table === 'employee' ? ALL_EMPLOYEE : expect.arrayContaining(['customer_id', 'email', 'phone', 'support_rep_id']));
  });

  test('built-in types read nothing; a type in another schema is matched by schema', () => {
    expect(readMap(ok("SELECT 1::int, 'x'::text, now()::timestamptz, NULL::numeric(10,2)"))).toEqual({});
    expect(readMap(ok('SELECT NULL::s.t'))).toEqual({ 's.t': ['x', 'y'] });
    expect(readMap(ok('SELECT NULL::only_in_s'))).toEqual({}); // `s` is not on the search path
  });

  test('pg_typeof stays allowed (it names types of values the statement may already read)', () => {
    expect(ok('SELECT pg_typeof(unit_price) FROM track').ok).toBe(true);
  });
});

describe('V5: connection details', () => {
  test.each([
    'SELECT current_user AS u',
    'SELECT session_user AS u',
    'SELECT user AS u',
    'SELECT current_role',
    'SELECT current_catalog AS d',
    'SELECT current_schema',
    'SELECT CURRENT_USER',
    'SELECT 1 WHERE current_user = \'x\'',
  ])('SQL value function %s is refused as function_not_allowed', (sql) => {
    const r = refused(sql);
    expect(r.code).toBe('function_not_allowed');
    expect(r.message).toMatch(/reveals details of the server or the connection/);
  });

  test.each([
    'SELECT current_database() AS d',
    'SELECT current_schema()',
    'SELECT current_schemas(true)',
    'SELECT system_user',
    'SELECT getpgusername()',
    'SELECT version() AS v',
    'SELECT pg_catalog.version()',
    'SELECT inet_server_addr()',
    'SELECT inet_server_port()',
    'SELECT inet_client_addr()',
    'SELECT pg_backend_pid()',
    'SELECT pg_postmaster_start_time()',
    'SELECT pg_conf_load_time()',
    'SELECT pg_is_in_recovery()',
    'SELECT pg_last_xact_replay_timestamp()',
    'SELECT txid_current_snapshot()',
    'SELECT txid_current_if_assigned()',
    'SELECT pg_current_snapshot()',
    'SELECT pg_current_xact_id_if_assigned()',
    'SELECT pg_blocking_pids(1)',
    'SELECT pg_listening_channels()',
    'SELECT current_query()',
    "SELECT pg_database_size('postgres')",
  ])('%s is refused as function_not_allowed', (sql) => {
    expect(refused(sql).code).toBe('function_not_allowed');
  });

  test.each([
    "SELECT current_setting('port') AS p",
    "SELECT current_setting('listen_addresses')",
    "SELECT current_setting('server_version')",
    "SELECT current_setting('server_version_num')",
    "SELECT current_setting('data_directory')",
    "SELECT current_setting('config_file')",
    "SELECT current_setting('hba_file')",
    "SELECT current_setting('is_superuser')",
    "SELECT current_setting('session_authorization')",
    "SELECT current_setting('application_name')",
    "SELECT current_setting('Time' || 'Zone')",
    'SELECT current_setting($1)',
    "SELECT current_setting(name) FROM (VALUES ('port')) v(name)",
    "SELECT current_setting(missing_ok => true, setting_name => 'port')",
    "SELECT * FROM current_setting('port')",
    "SELECT pg_catalog.current_setting('port')",
  ])('%s is refused', (sql) => {
    const r = refused(sql);
    expect(r.code).toBe('function_not_allowed');
    expect(r.message).toMatch(/current_setting/);
  });

  test.each([
    "SELECT current_setting('TimeZone')",
    "SELECT current_setting('timezone', true)",
    "SELECT current_setting('DateStyle')",
    "SELECT current_setting('IntervalStyle')",
    "SELECT current_setting('client_encoding')",
    "SELECT current_setting('server_encoding')",
    "SELECT current_setting('standard_conforming_strings')",
    "SELECT current_setting('extra_float_digits')",
    "SELECT current_setting('TimeZone'::text)",
    "SELECT current_setting(setting_name => 'DateStyle')",
  ])('%s is allowed (not cacheable)', (sql) => {
    const r = ok(sql);
    expect(r.cacheable).toBe(false);
  });

  test('date and time value functions stay allowed', () => {
    for (const sql of ['SELECT current_date', 'SELECT current_time', 'SELECT current_timestamp(3)', 'SELECT localtime', 'SELECT localtimestamp(2)']) {
      expect([sql, ok(sql).cacheable]).toEqual([sql, false]);
    }
  });

  test('policy helpers', () => {
    expect(deniedValueFunctionReason('SVFOP_CURRENT_USER')).toMatch(/CURRENT_USER/);
    expect(deniedValueFunctionReason('SVFOP_SOMETHING_NEW')).not.toBeNull(); // fail closed
    expect(deniedValueFunctionReason('SVFOP_LOCALTIMESTAMP_N')).toBeNull();
    expect(deniedSettingReason(null)).not.toBeNull();
    expect(deniedSettingReason('TIMEZONE')).toBeNull();
    expect(deniedSettingReason(' timezone')).not.toBeNull();
    expect(deniedTypeReason('RegClass')).not.toBeNull();
    expect(deniedTypeReason('_regclass')).not.toBeNull();
    expect(deniedTypeReason('text')).toBeNull();
    expect(deniedFunctionReason('VERSION')).not.toBeNull();
  });
});

describe('numeric literals the source server reads differently', () => {
  test.each(['SELECT 0x1F', 'SELECT 0X1f AS a', 'SELECT 0o17', 'SELECT 0b101', 'SELECT 1_000', 'SELECT 1_000.5', 'SELECT 1.5e1_0', 'SELECT * FROM customer WHERE customer_id = 0x1', 'SELECT 1 LIMIT 0b1'])('%s is refused as invalid_sql', (sql) => {
    const r = refused(sql);
    expect(r.code).toBe('invalid_sql');
    expect(r.message).toMatch(/plain decimal/);
  });

  test.each([
    'SELECT 1, 1.5, .5, 1., 1e3, 1.5E-3, 00012, $1',
    'SELECT address FROM customer c1_x WHERE c1_x.customer_id = 1',
    "SELECT '0x1F', '1_000', x'1F', b'101'",
    'SELECT 1 AS "0x1F"',
    'SELECT 1 /* 0x1F */',
  ])('%s is accepted', (sql) => {
    expect(analyzeSql(sql, CATALOG).ok).toBe(true);
  });
});
