/**
 * Trial nu40 item 7: loading Chinook (the demo's `npm start`) ANALYZEs it, so the planner's row
 * estimate of a table (what `approval show` prints as "about N row(s)") is its real size, not the
 * default for a never-analysed table (about 280 for playlist's 18 rows).
 */
import { Client } from 'pg';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { loadChinook } from '../../../src/demo/chinook';

jest.setTimeout(120_000);

let db: TempDatabase;
beforeAll(async () => {
  db = await createTempDatabase('chinook_an');
});
afterAll(async () => {
  await db?.drop();
});

test('after loadChinook the planner estimates playlist and genre at their row counts', async () => {
  await loadChinook(db.url);
  const c = new Client({ connectionString: db.url });
  await c.connect();
  try {
    for (const table of ['playlist', 'genre']) {
      const count = Number((await c.query(`SELECT count(*) AS n FROM public.${table}`)).rows[0].n);
      const plan = (await c.query(`EXPLAIN (FORMAT JSON) SELECT * FROM public.${table}`)).rows[0]['QUERY PLAN'][0].Plan as { 'Plan Rows': number };
      expect({ table, estimate: plan['Plan Rows'] }).toEqual({ table, estimate: count });
    }
  } finally {
    await c.end();
  }
});
