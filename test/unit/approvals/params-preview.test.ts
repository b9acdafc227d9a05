/**
 * Task low48 item 3: the approvals list's parameter preview (`approval list`, the console's list)
 * cut two writes whose values differ only past the cut to the same text. A shortened preview now
 * ends in `…#` and 6 hex digits of the SHA-256 of the full parameters' JSON, so they differ; it
 * keeps to the width and to one line.
 */
import { createHash } from 'node:crypto';
import { paramsForDisplay } from '../../../src/approvals/statement';
import { LIST_PARAMS_WIDTH } from '../../../src/cli/approval';
import { CONSOLE_PARAMS_WIDTH } from '../../../src/console/routes';


const digest = (params: unknown[]) => createHash('sha256').update(JSON.stringify(params)).digest('hex').slice(0, 6);

test.each([[CONSOLE_PARAMS_WIDTH], [LIST_PARAMS_WIDTH]])('two writes differing only after character 59 show different previews at width %i', (width) => {
  const common = 'z'.repeat(70);
  const one = [`${common}-first`, 7];
  const two = [`${common}-second`, 7];
  const a = paramsForDisplay(one, width);
  const b = paramsForDisplay(two, width);
  expect(a.text).not.toBe(b.text);
  expect([a.truncated, b.truncated]).toEqual([true, true]);
  for (const [p, params] of [[a, one], [b, two]] as const) {
    expect(p.text).toBe(`["${'z'.repeat(width - 10)}…#${digest(params)}`);
    expect(p.text.length).toBe(width);
    expect(p.text).not.toMatch(/[\n\r]/);
  }
});

test('a preview that fits is the JSON itself, without a digest', () => {
  expect(paramsForDisplay(['Focus', 3, null], CONSOLE_PARAMS_WIDTH)).toEqual({ text: '["Focus",3,null]', truncated: false });
});
