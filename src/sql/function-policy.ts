/**
 * Function policy for agent SQL (sql-safety.md layer 3).
 *
 * A function call is allowed only when (a) its bare name is not on the deny-list below, in ANY
 * schema and in any letter case, and (b) every candidate PostgreSQL could pick for it (every schema
 * of the search path that defines the name) is immutable or stable, or is one of the few harmless
 * volatile `pg_catalog` functions listed in `HARMLESS_VOLATILE`. Anything not in the catalogue is
 * refused (fail closed). Names are compared after parsing, so quoting, case and schema prefixes
 * cannot hide a name.
 *
 * The deny-list covers functions that PostgreSQL marks stable or immutable but that still have side
 * effects, read server files or state, run SQL text, or reveal other sessions; volatile ones are
 * listed too, so the refusal does not depend on the server's markings.
 */

/** Exact bare names that are always refused, with the reason an agent is told. */
const DENY_EXACT: ReadonlyMap<string, string> = new Map<string, string>([
  // sequences (write, survive ROLLBACK)
  ...['nextval', 'setval', 'currval', 'lastval', 'pg_sequence_last_value'].map((n) => [n, 'changes or reads sequence state'] as [string, string]),
  // session state
  ...['set_config', 'setseed', 'pg_export_snapshot', 'pg_prepared_statement', 'pg_cursor'].map((n) => [n, 'changes or reads session state'] as [string, string]),
  // sleeping / blocking
  ...['pg_sleep', 'pg_sleep_for', 'pg_sleep_until', 'pg_isolation_test_session_is_blocked'].map((n) => [n, 'blocks the session'] as [string, string]),
  // server files, paths and configuration
  ...[
    'pg_read_file', 'pg_read_file_old', 'pg_read_binary_file', 'pg_stat_file', 'pg_current_logfile', 'pg_relation_filepath',
    'pg_relation_filenode', 'pg_filenode_relation', 'pg_tablespace_location', 'pg_config', 'pg_show_all_settings',
    'pg_show_all_file_settings', 'pg_hba_file_rules', 'pg_ident_file_mappings', 'pg_settings_get_flags', 'pg_logdir_ls',
  ].map((n) => [n, 'reads server files or configuration'] as [string, string]),
  // administration
  ...[
    'pg_terminate_backend', 'pg_cancel_backend', 'pg_reload_conf', 'pg_rotate_logfile', 'pg_rotate_logfile_old', 'pg_switch_wal',
    'pg_create_restore_point', 'pg_start_backup', 'pg_stop_backup', 'pg_promote', 'pg_import_system_collations', 'pg_nextoid',
    'pg_log_backend_memory_contexts', 'pg_get_backend_memory_contexts', 'pg_get_shmem_allocations', 'pg_stop_making_pinned_objects',
    'pg_extension_config_dump', 'pg_prewarm', 'pg_truncate_visibility_map', 'gin_clean_pending_list', 'brin_summarize_new_values',
    'brin_summarize_range', 'brin_desummarize_range', 'pg_mcv_list_items', 'pg_get_replication_slots', 'pg_get_wal_replay_pause_state',
  ].map((n) => [n, 'is an administrative function'] as [string, string]),
  // notifications, transaction ids (assigning an xid writes)
  ...['pg_notify', 'txid_current', 'pg_current_xact_id', 'pg_xact_commit_timestamp', 'pg_xact_commit_timestamp_origin', 'pg_last_committed_xact']
    .map((n) => [n, 'has transaction-level side effects'] as [string, string]),
  // functions that run SQL text or read relations named by a string, bypassing authorization
  ...['ts_stat', 'ts_rewrite', 'query_to_xml_and_xmlschema'].map((n) => [n, 'runs SQL text or reads relations by name'] as [string, string]),
  // network addresses of client and server (never shown to agents)
  ...['inet_client_addr', 'inet_client_port', 'inet_server_addr', 'inet_server_port'].map((n) => [n, 'reveals network addresses'] as [string, string]),
  // catalogue metadata outside what policy exposes (definitions of views, functions, rules, comments)
  ...['obj_description', 'col_description', 'shobj_description', 'pg_describe_object', 'pg_identify_object', 'pg_identify_object_as_address']
    .map((n) => [n, 'reads catalogue metadata (use the describe tool)'] as [string, string]),
  // existence, shape and privileges of objects the caller may not be allowed to see
  ...[
    'format_type', 'pg_relation_size', 'pg_total_relation_size', 'pg_table_size', 'pg_indexes_size',
    'pg_database_size', 'pg_tablespace_size', 'pg_tablespace_databases', 'pg_partition_tree', 'pg_partition_ancestors',
    'pg_partition_root', 'pg_column_is_updatable', 'pg_relation_is_updatable', 'pg_relation_is_publishable',
    'pg_index_column_has_property', 'pg_index_has_property', 'pg_indexam_has_property', 'pg_sequence_parameters',
    'pg_input_is_valid', 'pg_input_error_info', 'row_security_active', 'pg_has_role', 'currtid', 'currtid2',
    'acldefault', 'aclexplode', 'makeaclitem', 'aclitemin', 'pg_get_acl', 'pg_options_to_table', 'pg_collation_actual_version',
    'pg_database_collation_actual_version', 'pg_is_other_temp_schema', 'pg_my_temp_schema',
  ].map((n) => [n, 'reveals the existence, shape or privileges of database objects'] as [string, string]),
  // who and where the gateway is connected (role, database, server, version, process)
  ...[
    'current_user', 'session_user', 'current_role', 'system_user', 'getpgusername', 'user', 'current_catalog',
    'current_database', 'current_schema', 'current_schemas', 'version', 'pg_backend_pid', 'pg_postmaster_start_time',
    'pg_conf_load_time', 'current_query', 'pg_is_in_recovery', 'pg_is_wal_replay_paused', 'pg_listening_channels',
    'pg_notification_queue_usage', 'pg_blocking_pids', 'pg_safe_snapshot_blocking_pids',
  ].map((n) => [n, 'reveals details of the server or the connection'] as [string, string]),
  // large objects
  ...['loread', 'lowrite'].map((n) => [n, 'accesses large objects'] as [string, string]),
  // shell access through the generic 'system' helpers some extensions add
  ['system', 'runs shell commands'],
]);

/** Bare-name prefixes that are always refused. */
const DENY_PREFIX: ReadonlyArray<readonly [string, string]> = [
  ['pg_advisory_', 'takes advisory locks'],
  ['pg_try_advisory_', 'takes advisory locks'],
  ['pg_sleep', 'blocks the session'],
  ['pg_read_', 'reads server files'],
  ['pg_ls_', 'lists server directories'],
  ['pg_file_', 'writes server files'],
  ['pg_stat_', 'reads or resets server statistics and other sessions'],
  ['pg_logical_', 'uses logical replication'],
  ['pg_replication_', 'uses replication'],
  ['pg_create_', 'is an administrative function'],
  ['pg_drop_', 'is an administrative function'],
  ['pg_copy_', 'is an administrative function'],
  ['pg_backup_', 'is an administrative function'],
  ['pg_wal_replay_', 'is an administrative function'],
  ['pg_get_wal_', 'reads the write-ahead log'],
  ['pg_walinspect', 'reads the write-ahead log'],
  ['pg_control_', 'reads server control data'],
  ['pg_visibility', 'reads storage internals'],
  ['pg_buffercache', 'reads storage internals'],
  ['pg_freespace', 'reads storage internals'],
  ['pgstat', 'reads storage internals'],
  ['pgrowlocks', 'reads storage internals'],
  ['get_raw_page', 'reads storage internals'],
  ['heap_page_', 'reads storage internals'],
  ['page_header', 'reads storage internals'],
  ['bt_', 'reads storage internals'],
  ['pg_event_trigger_', 'is an administrative function'],
  ['pg_get_', 'reads catalogue metadata (use the describe tool)'],
  ['binary_upgrade_', 'is an administrative function'],
  ['lo_', 'accesses large objects'],
  ['dblink', 'opens connections to other servers'],
  ['postgres_fdw', 'opens connections to other servers'],
  ['txid_', 'reveals transaction ids and snapshots'],
  ['pg_current_', 'reveals transaction ids, snapshots or write-ahead log positions'],
  ['pg_snapshot_', 'reveals transaction ids and snapshots'],
  ['pg_xact_', 'reveals transaction ids and snapshots'],
  ['pg_visible_in_snapshot', 'reveals transaction ids and snapshots'],
  ['pg_last_', 'reveals replication state'],
  ['to_reg', 'reveals the existence of database objects'],
  ['pg_current_wal', 'reads write-ahead log positions'],
];

/**
 * The built-in functions that run SQL text or read relations named by a string (`query_to_xml`,
 * `table_to_xmlschema`, `cursor_to_xml`, …, `ts_stat`, `ts_rewrite`), as an alternation of bare
 * names (a regular expression source). Refused in agent statements (below); a view whose
 * definition calls one is treated as calling user code (src/sql/view-lineage.ts: the server
 * records no dependency on a built-in, and such a view reads rows its dependency records do not
 * name; red team rt27z finding Z2).
 */
export const RUNS_SQL_TEXT_NAMES = '(?:query|table|cursor|database|schema)_to_xml\\w*|ts_stat|ts_rewrite';

/** `query_to_xml`, `table_to_xmlschema`, `cursor_to_xml`, … run SQL text or read relations by name. */
const DENY_RE: ReadonlyArray<readonly [RegExp, string]> = [
  [/^(query|table|cursor|database|schema)_to_xml/, 'runs SQL text or reads relations by name'],
  // has_table_privilege, has_column_privilege, … and pg_table_is_visible, pg_type_is_visible, …
  [/^has_.*privilege$/, 'reveals the existence, shape or privileges of database objects'],
  [/^pg_.*_is_visible$/, 'reveals the existence, shape or privileges of database objects'],
];

/**
 * Volatile `pg_catalog` functions that are allowed anyway: they have no side effect beyond their
 * result. A statement using one is not cacheable. `setseed` is NOT here: it changes session state.
 */
export const HARMLESS_VOLATILE: ReadonlySet<string> = new Set([
  'random',
  'random_normal',
  'gen_random_uuid',
  'uuidv4',
  'uuidv7',
  'clock_timestamp',
  'timeofday',
]);

/**
 * Stable (or allowed volatile) functions whose result depends on the clock, the session or the
 * server rather than only on the data: a statement calling one is not cacheable. Every function
 * outside `pg_catalog` also makes a statement not cacheable (its behaviour is unknown).
 */
const TIME_OR_SESSION_DEPENDENT: ReadonlySet<string> = new Set([
  'now',
  'transaction_timestamp',
  'statement_timestamp',
  'clock_timestamp',
  'timeofday',
  'age',
  'current_setting',
  'current_database',
  'current_schema',
  'current_schemas',
  'current_user',
  'session_user',
  'current_query',
  'current_role',
  'system_user',
  'getpgusername',
  'pg_backend_pid',
  'pg_conf_load_time',
  'pg_postmaster_start_time',
  'pg_current_snapshot',
  'pg_current_xact_id_if_assigned',
  'txid_current_snapshot',
  'pg_is_in_recovery',
  'pg_trigger_depth',
  'pg_listening_channels',
  'pg_blocking_pids',
  'pg_safe_snapshot_blocking_pids',
  'pg_my_temp_schema',
  'pg_jit_available',
  'pg_notification_queue_usage',
  'version',
  'pg_has_role',
  'row_security_active',
  'to_regclass',
  'to_regproc',
  'to_regprocedure',
  'to_regoper',
  'to_regoperator',
  'to_regtype',
  'to_regnamespace',
  'to_regrole',
  'to_regcollation',
]);

/**
 * Object-identifier alias types: a cast to one of them (`'employee'::regclass`, `'f'::regproc`)
 * looks the name up in the system catalogues, telling an existing object from a missing one
 * whatever the caller may read; `aclitem` input looks role names up the same way.
 */
const DENY_TYPES: ReadonlySet<string> = new Set([
  'regclass', 'regcollation', 'regconfig', 'regdictionary', 'regnamespace', 'regoper', 'regoperator', 'regproc',
  'regprocedure', 'regrole', 'regtype', 'aclitem',
]);

/** Types whose values describe the server's state; no agent statement may produce one (issue 12, Build 3). */
export const SERVER_STATE_TYPES: ReadonlySet<string> = new Set(['xid', 'xid8', 'cid', 'tid', 'txid_snapshot', 'pg_snapshot', 'pg_lsn']);

/**
 * Returns the agent-facing reason why a cast to the built-in type `name` (bare, as parsed) is
 * refused, or null. Case-insensitive.
 */
export function deniedTypeReason(name: string): string | null {
  const n = name.toLowerCase();
  const base = n.startsWith('_') ? n.slice(1) : n; // array type spelled by its internal name
  if (DENY_TYPES.has(base)) return 'looks objects up by name in the system catalogues (reveals which exist)';
  if (SERVER_STATE_TYPES.has(base)) return 'holds transaction ids, snapshots, tuple ids or write-ahead log positions (reveals server state)';
  return null;
}

/**
 * SQL value functions (`CURRENT_USER`, `SESSION_USER`, `USER`, `CURRENT_ROLE`, `CURRENT_CATALOG`,
 * `CURRENT_SCHEMA`) reveal the gateway's connection; the date/time ones are allowed. Takes the
 * parse tree's `op` (`SVFOP_…`); returns the refusal message or null.
 */
export function deniedValueFunctionReason(op: string): string | null {
  switch (op) {
    case 'SVFOP_CURRENT_DATE':
    case 'SVFOP_CURRENT_TIME':
    case 'SVFOP_CURRENT_TIME_N':
    case 'SVFOP_CURRENT_TIMESTAMP':
    case 'SVFOP_CURRENT_TIMESTAMP_N':
    case 'SVFOP_LOCALTIME':
    case 'SVFOP_LOCALTIME_N':
    case 'SVFOP_LOCALTIMESTAMP':
    case 'SVFOP_LOCALTIMESTAMP_N':
      return null;
    default: {
      const word = op.replace(/^SVFOP_/, '').replace(/_N$/, '');
      return `${word} is not allowed: it reveals details of the server or the connection`;
    }
  }
}

/**
 * Settings `current_setting` may read: client-facing formatting settings, and the session's own
 * safety limits (read-only, timeouts, search path), which an agent may want to know and which say
 * nothing about the server, its address, files, version or roles. Compared case-insensitively.
 */
const SAFE_SETTING_NAMES = [
  'TimeZone',
  'DateStyle',
  'IntervalStyle',
  'client_encoding',
  'server_encoding',
  'standard_conforming_strings',
  'extra_float_digits',
  'statement_timeout',
  'lock_timeout',
  'idle_in_transaction_session_timeout',
  'default_transaction_read_only',
  'transaction_read_only',
  'search_path',
];
export const SAFE_SETTINGS: ReadonlySet<string> = new Set(SAFE_SETTING_NAMES.map((n) => n.toLowerCase()));

/**
 * Returns why `current_setting(name)` is refused (`null` name = not a constant), or null when the
 * setting is in `SAFE_SETTINGS`. The text completes "function current_setting is not allowed …".
 */
export function deniedSettingReason(name: string | null): string | null {
  if (name === null) return 'with a setting name that is not a constant';
  if (!SAFE_SETTINGS.has(name.toLowerCase())) return `for this setting (allowed: ${SAFE_SETTING_NAMES.join(', ')})`;
  return null;
}

/**
 * Returns the agent-facing reason why `name` (a bare function name as written after parsing) is on
 * the deny-list, or `null` when it is not. Case-insensitive; schema-independent (a `dblink_exec`
 * in `public` is refused like one in `pg_catalog`). Implements sql-safety.md layer 3 (deny-list).
 */
export function deniedFunctionReason(name: string): string | null {
  const n = name.toLowerCase();
  const exact = DENY_EXACT.get(n);
  if (exact !== undefined) return exact;
  for (const [p, why] of DENY_PREFIX) if (n.startsWith(p)) return why;
  for (const [re, why] of DENY_RE) if (re.test(n)) return why;
  return null;
}

/**
 * True when a call to `schema.name` makes the statement's result depend on something other than
 * the data and the parameters (clock, session, server, or unknown user code); such statements are
 * reported `cacheable: false`.
 */
export function isCacheBreaking(schema: string, name: string, volatility: string): boolean {
  if (volatility === 'volatile') return true;
  if (schema !== 'pg_catalog') return true;
  return TIME_OR_SESSION_DEPENDENT.has(name) || name.startsWith('has_') || name.endsWith('_privilege');
}

/** The constant-size check of allocation-sized built-ins lives in builtin-functions/sizing.ts (issue 22, item 4). */
export { RESOURCE_CHECKED, RESOURCE_LIMIT } from './builtin-functions/sizing';
