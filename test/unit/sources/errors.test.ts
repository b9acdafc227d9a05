/**
 * SourceError and failure classification (src/sources/postgres/errors.ts): contract codes and
 * messages from spec/errors-v1.json, which failures count against the breaker, TLS detection,
 * and (property) that no driver text, host, address, port or user name reaches message or JSON.
 */
import fc from 'fast-check';
import { DatabaseError } from 'pg';
import {
  connectFailureText,
  SourceError,
  classifyFailure,
  defaultMessage,
  isConnectionLost,
  isTlsFailure,
  sqlStateClassName,
  CONTRACT_CODE,
  type FailureContext,
} from '../../../src/sources/postgres/errors';
import { refusalInfo, toolErrorInfo } from '../../../src/errors/vocabulary';

const CONNECT: FailureContext = { phase: 'connect', tlsConfigured: false };
const QUERY: FailureContext = { phase: 'query', tlsConfigured: false };

function serverError(code: string, message = 'boom', severity = 'ERROR'): DatabaseError {
  const e = new DatabaseError(message, message.length, 'error');
  e.code = code;
  e.severity = severity;
  return e;
}
function sysError(message: string, props: Record<string, unknown>): Error {
  return Object.assign(new Error(message), props);
}

describe('SourceError', () => {
  test('codes map to the contract vocabulary with its messages', () => {
    expect(new SourceError('circuit_open').message).toBe(refusalInfo('circuit_open').message);
    expect(new SourceError('upstream_tls_refused').message).toBe(refusalInfo('upstream_tls_refused').message);
    expect(new SourceError('statement_timeout').message).toBe(refusalInfo('statement_timeout').message);
    expect(new SourceError('cancelled').message).toBe(toolErrorInfo('cancelled').message);
    expect(new SourceError('execution_failed').message).toBe('tool execution failed');
    expect(new SourceError('execution_failed').contractCode).toBe('tool_execution_failed');
    for (const [code, contract] of Object.entries(CONTRACT_CODE)) {
      expect(new SourceError(code as keyof typeof CONTRACT_CODE).contractCode).toBe(contract);
      expect(defaultMessage(code as keyof typeof CONTRACT_CODE)).not.toBe('');
    }
  });

  test('the cause is kept for logs but is neither enumerable nor serialised', () => {
    const cause = new Error('connect ECONNREFUSED 10.0.0.7:6432');
    const e = new SourceError('execution_failed', { cause, sourceFailure: true, sqlState: '08006' });
    expect(e.cause).toBe(cause);
    expect(Object.keys(e)).not.toContain('cause');
    expect(JSON.stringify(e)).toBe('{"name":"SourceError","code":"execution_failed","message":"tool execution failed"}');
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('SourceError');
  });
});

describe('classifyFailure', () => {
  test('cancellation by the caller wins over whatever the server said', () => {
    const e = classifyFailure(serverError('57014', 'canceling statement due to user request'), { ...QUERY, cancelledByCaller: true });
    expect(e).toMatchObject({ code: 'cancelled', sourceFailure: false });
  });

  test('57014 not caused by us is a statement timeout (the statement cost: does not count); the watchdog (a statement that outlived its cancel) does not count either', () => {
    expect(classifyFailure(serverError('57014', 'canceling statement due to statement timeout'), QUERY)).toMatchObject({ code: 'statement_timeout', sourceFailure: false });
    expect(classifyFailure(new Error('no answer'), { ...QUERY, watchdogFired: true })).toMatchObject({ code: 'statement_timeout', sourceFailure: false });
  });

  test.each([
    ['42601', 'syntax_error_or_access_rule_violation'],
    ['42501', 'syntax_error_or_access_rule_violation'],
    ['42P01', 'syntax_error_or_access_rule_violation'],
    ['23505', 'integrity_constraint_violation'],
    ['22012', 'data_exception'],
    ['25006', 'invalid_transaction_state'],
    ['55P03', 'object_not_in_prerequisite_state'],
    ['40001', 'transaction_rollback'],
    ['0A000', 'feature_not_supported'],
    ['XX000', 'internal_error'],
    ['54000', 'program_limit_exceeded'],
    ['2BP01', 'dependent_privilege_descriptors_still_exist'],
  ])('statement error %s: execution_failed naming only the class %s; does not count', (code, cls) => {
    const e = classifyFailure(serverError(code, `relation "secret_table" at 10.1.1.1 for user bob`), QUERY);
    expect(e).toMatchObject({ code: 'execution_failed', sourceFailure: false, sqlState: code });
    expect(e.message).toBe(`tool execution failed: the statement failed (${cls})`);
  });

  test.each(['08006', '57P01', '57P02', '57P03', '58030', 'XX001', 'XX002', 'F0000', '28P01', '3D000'])('source-class server error %s while running counts and is opaque', (code) => {
    const e = classifyFailure(serverError(code, 'server at db1.internal:5432 said no'), QUERY);
    expect(e).toMatchObject({ code: 'execution_failed', sourceFailure: true, sqlState: code, message: 'tool execution failed' });
  });

  test.each(['53000', '53100', '53200', '53300', '53400'])('class 53 raised by a running statement (ERROR) %s does not count (red team rt49b D2: a read of thousands of partitions fills the lock table, 53200)', (code) => {
    const e = classifyFailure(serverError(code, 'out of shared memory'), QUERY);
    expect(e).toMatchObject({ code: 'execution_failed', sourceFailure: false, sqlState: code });
  });

  test('a FATAL of any class counts; any server error while connecting counts', () => {
    expect(classifyFailure(serverError('42501', 'x', 'FATAL'), QUERY)).toMatchObject({ sourceFailure: true, message: 'tool execution failed' });
    expect(classifyFailure(serverError('42501', 'permission denied for database'), CONNECT)).toMatchObject({ sourceFailure: true, message: 'tool execution failed' });
  });

  const UNAVAILABLE_MESSAGE =
    "The source database cannot be reached now (its server refuses or drops connections, is shutting down or starting up, does not accept the gateway's credentials, or its database is missing); nothing was run. Try again later; an operator can see why in the gateway log.";

  test('socket, DNS and timeout errors: source_unavailable while connecting, opaque while running; both count', () => {
    for (const err of [
      sysError('connect ECONNREFUSED 127.0.0.1:5432', { code: 'ECONNREFUSED', address: '127.0.0.1', port: 5432, syscall: 'connect' }),
      sysError('getaddrinfo ENOTFOUND db.internal', { code: 'ENOTFOUND', hostname: 'db.internal', syscall: 'getaddrinfo' }),
      new Error('Connection terminated due to connection timeout'),
      new Error('Connection terminated unexpectedly'),
    ]) {
      const e = classifyFailure(err, CONNECT);
      expect(e).toMatchObject({ code: 'source_unavailable', sourceFailure: true, message: UNAVAILABLE_MESSAGE });
      expect(e.contractCode).toBe('source_unavailable');
      expect(JSON.stringify(e)).toBe(JSON.stringify({ name: 'SourceError', code: 'source_unavailable', message: UNAVAILABLE_MESSAGE }));
      expect(classifyFailure(err, QUERY)).toMatchObject({ code: 'execution_failed', sourceFailure: true, message: 'tool execution failed' });
    }
  });

  test.each(['3D000', '28P01', '28000', '57P01', '57P02', '57P03', '53300', '08006'])('server error %s while connecting: source_unavailable (counts), no server text', (code) => {
    const e = classifyFailure(serverError(code, 'database "secret_db" at db1.internal:5432 does not exist', 'FATAL'), CONNECT);
    expect(e).toMatchObject({ code: 'source_unavailable', sourceFailure: true, message: UNAVAILABLE_MESSAGE });
    expect(e.message).not.toContain('secret_db');
  });

  test('waiting for a free pooled connection is local saturation: source_busy with a retry hint, not a source failure', () => {
    expect(classifyFailure(new Error('timeout exceeded when trying to connect'), CONNECT)).toMatchObject({ code: 'source_busy', sourceFailure: false, retryAfterMs: 1000 });
  });

  test("the gateway's own wire-guard failure is opaque and never counts", () => {
    const err = Object.assign(new Error('a message took the connection past its byte budget'), { code: 'EINTERLOCK_WIRE' });
    expect(classifyFailure(err, QUERY)).toMatchObject({ code: 'execution_failed', sourceFailure: false, message: 'tool execution failed' });
  });

  test('TLS failures while connecting with TLS configured → upstream_tls_refused (counts)', () => {
    const tlsCtx: FailureContext = { phase: 'connect', tlsConfigured: true };
    for (const err of [
      new Error('The server does not support SSL connections'),
      new Error('There was an error establishing an SSL connection'),
      sysError('unable to verify the first certificate', { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' }),
      sysError("Hostname/IP does not match certificate's altnames: IP: 127.0.0.1 is not in the cert's list", { code: 'ERR_TLS_CERT_ALTNAME_INVALID' }),
      sysError('self-signed certificate', { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }),
      sysError('self-signed certificate in certificate chain', { code: 'SELF_SIGNED_CERT_IN_CHAIN' }),
      sysError('wrong version number', { code: 'ERR_SSL_WRONG_VERSION_NUMBER', library: 'SSL routines' }),
      new Error('Connection terminated due to connection timeout', { cause: sysError('x', { code: 'CERT_HAS_EXPIRED' }) }),
    ]) {
      expect(isTlsFailure(err)).toBe(true);
      expect(classifyFailure(err, tlsCtx)).toMatchObject({ code: 'upstream_tls_refused', sourceFailure: true });
      expect(classifyFailure(err, CONNECT).code).not.toBe('upstream_tls_refused'); // TLS not configured: not a TLS refusal
    }
    expect(isTlsFailure(sysError('connect ECONNREFUSED', { code: 'ECONNREFUSED' }))).toBe(false);
  });

  test('errors from another realm (no instanceof Error) are still classified', () => {
    const foreign = { message: 'unable to verify the first certificate', code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' };
    expect(classifyFailure(foreign, { phase: 'connect', tlsConfigured: true }).code).toBe('upstream_tls_refused');
    const foreignServer = { message: 'x', code: '42P01', severity: 'ERROR' };
    expect(classifyFailure(foreignServer, QUERY)).toMatchObject({ sourceFailure: false, sqlState: '42P01' });
  });

  test('a SourceError passes through unchanged; odd values become opaque failures', () => {
    const se = new SourceError('circuit_open');
    expect(classifyFailure(se, QUERY)).toBe(se);
    for (const v of [undefined, null, 42, 'text with 10.0.0.1', { foo: 1 }]) {
      expect(classifyFailure(v, QUERY)).toMatchObject({ code: 'execution_failed', message: 'tool execution failed' });
    }
  });

  test('sqlStateClassName', () => {
    expect(sqlStateClassName('23505')).toBe('integrity_constraint_violation');
    expect(sqlStateClassName('hv000')).toBe('fdw_error');
    expect(sqlStateClassName('ZZ999')).toBe('unknown_class');
  });
});

describe('property: driver text never reaches message or JSON', () => {
  const word = fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789'), minLength: 4, maxLength: 10 });
  const host = word.map((w) => `h${w}.example.internal`);
  const ip = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((t) => t.join('.'));
  const ipv6 = fc.tuple(word, word).map(([a, b]) => `fd00::${a.length}:${b.length}${a.length}${b.length}`);
  const port = fc.integer({ min: 1024, max: 65535 });
  const user = word.map((w) => `u_${w}`);
  const sqlState = fc.oneof(
    fc.constantFrom('08006', '08001', '28P01', '28000', '3D000', '53300', '57P01', '57014', 'XX000', '42P01', '42501', '23505', '22P02', '25006'),
    fc.string({ unit: fc.constantFrom(...'0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ'), minLength: 5, maxLength: 5 }),
  );
  const ctx = fc.record({
    phase: fc.constantFrom('connect' as const, 'query' as const),
    tlsConfigured: fc.boolean(),
    cancelledByCaller: fc.boolean(),
    watchdogFired: fc.boolean(),
  });

  test('classifyFailure output carries none of the injected secrets', () => {
    fc.assert(fc.property(host, ip, ipv6, port, user, word.map((w) => `d_${w}`), sqlState, ctx, fc.integer({ min: 0, max: 3 }), (h, a, a6, p, u, db, code, c, shape) => {
      const text = `connection to server at "${h}" (${a}), port ${p} failed: FATAL: password authentication failed for user "${u}" database "${db}" [${a6}]`;
      const err =
        shape === 0
          ? serverError(code, text, 'FATAL')
          : shape === 1
            ? serverError(code, text, 'ERROR')
            : shape === 2
              ? sysError(text, { code: 'ECONNREFUSED', address: a, port: p, hostname: h, user: u })
              : new Error(text, { cause: sysError(text, { code: 'ERR_TLS_CERT_ALTNAME_INVALID', host: h, cert: { subject: { CN: h } } }) });
      const se = classifyFailure(err, c);
      for (const s of [se.message, JSON.stringify(se), String(se)]) {
        for (const secret of [h, a, a6, String(p), u, db, 'password', 'FATAL', 'connection to server']) expect(s).not.toContain(secret);
      }
    }), { numRuns: 500 });
  });
});

describe('connectFailureText (operators\' messages: no driver text, host, port or role)', () => {
  const serverError = (code: string, message: string) => Object.assign(new Error(message), { code, severity: 'FATAL' });
  it.each([
    [Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' }), 'connection refused'],
    [Object.assign(new Error('getaddrinfo ENOTFOUND db.internal'), { code: 'ENOTFOUND' }), 'host name not found'],
    [serverError('28P01', 'password authentication failed for user "reader"'), 'the server refused: 28P01 invalid_authorization_specification'],
    [serverError('3D000', 'database "secret_db" does not exist'), 'the server refused: 3D000 invalid_catalog_name'],
    [new Error('Connection terminated due to connection timeout'), 'no answer within the connect timeout'],
    // Task hnu41 item 5: a server with ssl off is told apart from a failed handshake or certificate check.
    [new Error('The server does not support SSL connections'), 'the server does not support TLS connections'],
    [new Error('connect failed', { cause: new Error('The server does not support SSL connections') }), 'the server does not support TLS connections'],
    [new Error('There was an error establishing an SSL connection'), 'TLS negotiation or certificate verification failed'],
    [Object.assign(new Error('self-signed certificate'), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }), 'TLS negotiation or certificate verification failed'],
    [new Error('something at 10.0.0.7:5432'), 'the connection failed'],
  ])('%s → %s', (err, text) => {
    expect(connectFailureText(err)).toBe(text);
  });
});

describe('isConnectionLost (task hidle: a session gone before the server ran what was sent)', () => {
  test.each(['57P01', '57P02', '57P03', '57P05'])('a FATAL %s ended the session', (code) => {
    expect(isConnectionLost(serverError(code, 'terminating connection', 'FATAL'))).toBe(true);
  });
  test.each(['ECONNRESET', 'EPIPE', 'ECONNABORTED'])('a socket %s: the other side had closed', (code) => {
    expect(isConnectionLost(sysError('read ' + code, { code }))).toBe(true);
  });
  test('not: the same codes as an ERROR, other FATALs, statement errors, a plain end of the socket, timeouts', () => {
    expect(isConnectionLost(serverError('57P01', 'x', 'ERROR'))).toBe(false);
    expect(isConnectionLost(serverError('08P01', 'x', 'FATAL'))).toBe(false);
    expect(isConnectionLost(serverError('25P03', 'x', 'FATAL'))).toBe(false);
    expect(isConnectionLost(serverError('57014'))).toBe(false);
    expect(isConnectionLost(new Error('Connection terminated unexpectedly'))).toBe(false);
    expect(isConnectionLost(sysError('connect ETIMEDOUT', { code: 'ETIMEDOUT' }))).toBe(false);
    expect(isConnectionLost(new SourceError('cancelled'))).toBe(false);
    expect(isConnectionLost(undefined)).toBe(false);
  });
});
