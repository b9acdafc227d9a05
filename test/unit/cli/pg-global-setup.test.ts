/**
 * The jest globalSetup of the integration and e2e projects (test/helpers/pg-global-setup.ts): with
 * the test PostgreSQL unreachable it rejects with one line naming the URL (password hidden), how to
 * start it and how to run only the unit tests; no stack, no driver text beyond the error code.
 */
import { checkTestPostgres } from '../../helpers/pg-global-setup';

test('an unreachable test PostgreSQL stops the run with one clear line', async () => {
  const err = (await checkTestPostgres('postgres://root:secret@127.0.0.1:1/postgres').then(() => null, (e: unknown) => e)) as Error | null;
  expect(err).toBeInstanceOf(Error);
  const line =
    'The integration and end-to-end tests need PostgreSQL at postgres://root:***@127.0.0.1:1/postgres (INTERLOCK_TEST_PG_URL), which cannot be reached (ECONNREFUSED): start it as README "Test it" says (a superuser connecting over TCP without a password), or run only the unit tests: npx jest --selectProjects unit';
  expect(err!.message).toBe(line);
  expect(err!.stack).toBe(line);
});
