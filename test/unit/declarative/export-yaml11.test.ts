/**
 * `interlock export` writes YAML that YAML 1.1 readers (PyYAML, older tools) read back as the same
 * values (task hnu42b item 5): strings such as `off`, `yes`, `on` and `0777` are quoted, so
 * `tls: {mode: off}` is not read as `mode: false`.
 */
import YAML from 'yaml';
import { renderInterlockFile } from '../../../src/declarative/export';
import type { InterlockFile } from '../../../src/declarative/schema';

const file = {
  version: 1,
  sources: [{ id: 'sales', type: 'postgres', name: 'on', description: 'yes', enabled: true, settings: { host: 'db', port: 5432, database: '0777', reader: { user: 'n', password_env: 'SALES_READER_PASSWORD' }, tls: { mode: 'off' } } }],
} as unknown as InterlockFile;

test('strings a YAML 1.1 reader would take for booleans or numbers are quoted', () => {
  const text = renderInterlockFile(file);
  expect(text).toContain('mode: "off"');
  const body = YAML.parse(text) as InterlockFile;
  expect(body).toEqual(file);
  // The same values for a YAML 1.1 reader.
  expect(YAML.parse(text, { version: '1.1' })).toEqual(file);
});
