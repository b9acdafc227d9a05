/** Control-database URLs with several hosts (issue 29 item 2): parsing and redaction. */
import { parseControlUrl } from '../../../src/control/targets';
import { redactUrl } from '../../../src/control/db';

test('a single-host URL without target_session_attrs is used as given', () => {
  const t = parseControlUrl('postgres://u:pw@db.example:6432/interlock?sslmode=require');
  expect(t.located).toBe(false);
  expect(t.targetSessionAttrs).toBe('any');
  expect(t.hosts).toEqual([{ host: 'db.example', port: 6432 }]);
});

test('several hosts with target_session_attrs=read-write: each host with its port, the parameter removed from the per-host URL', () => {
  const t = parseControlUrl('postgresql://u:p%40ss@h1:5433,h2,[::1]:7000/interlock?target_session_attrs=read-write&sslmode=disable');
  expect(t.located).toBe(true);
  expect(t.targetSessionAttrs).toBe('read-write');
  expect(t.hosts).toEqual([
    { host: 'h1', port: 5433 },
    { host: 'h2', port: 5432 },
    { host: '::1', port: 7000 },
  ]);
  expect(t.urlFor(t.hosts[2])).toBe('postgresql://u:p%40ss@[::1]:7000/interlock?sslmode=disable');
  expect(t.urlFor(t.hosts[1])).toBe('postgresql://u:p%40ss@h2:5432/interlock?sslmode=disable');
});

test('one host with target_session_attrs given is located too', () => {
  expect(parseControlUrl('postgres://h1/db?target_session_attrs=read-write').located).toBe(true);
  expect(parseControlUrl('postgres://h1/db?target_session_attrs=any').targetSessionAttrs).toBe('any');
});

test('unsupported target_session_attrs values and bad ports are refused with a clear error', () => {
  expect(() => parseControlUrl('postgres://h1,h2/db?target_session_attrs=standby')).toThrow('target_session_attrs=standby is not supported for the control database (use read-write or any)');
  expect(() => parseControlUrl('postgres://h1:99999,h2/db')).toThrow('the control database URL has a bad port in host "h1:99999"');
});

test('redactUrl hides the password of a several-host URL', () => {
  expect(redactUrl('postgresql://u:secret@h1:1,h2:2/db?target_session_attrs=read-write')).toBe('postgresql://u:***@h1:1,h2:2/db?target_session_attrs=read-write');
  expect(redactUrl('postgresql://u@h1:1,h2:2/db')).toBe('postgresql://u@h1:1,h2:2/db');
  expect(redactUrl('postgresql://h1:1,h2:2/db')).toBe('postgresql://h1:1,h2:2/db');
  expect(redactUrl('postgres://u:secret@one:5432/db')).toBe('postgres://u:***@one:5432/db');
});
