/**
 * Messages cut to a length end on a character boundary (issue 22, item 6): never half of a
 * surrogate pair (an emoji cut in two), which strict JSON clients reject.
 */
import fc from 'fast-check';
import { clipText, cutText } from '../../../src/errors/cut-text';
import { safeParserMessage } from '../../../src/sql/parser';
import { failureCause } from '../../../src/approvals/causes';

const EMOJI = '\u{1F600}'; // 😀, two UTF-16 code units
/** String.prototype.isWellFormed (ES2024), spelled out for the project's TypeScript lib: no lone surrogate. */
const wellFormed = (s: string) => !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);

describe('cutText / clipText', () => {
  test('a cut inside a surrogate pair drops the whole pair', () => {
    expect(cutText(`ab${EMOJI}cd`, 3)).toBe('ab');
    expect(cutText(`ab${EMOJI}cd`, 4)).toBe(`ab${EMOJI}`);
    expect(cutText(`ab${EMOJI}cd`, 2)).toBe('ab');
    expect(cutText(EMOJI, 1)).toBe('');
    expect(cutText('abc', 10)).toBe('abc');
    expect(cutText('abc', -1)).toBe('');
  });

  test('the well-formedness check sees a lone surrogate', () => {
    expect(wellFormed(EMOJI.slice(0, 1))).toBe(false);
    expect(wellFormed(EMOJI.slice(1))).toBe(false);
    expect(wellFormed(`a${EMOJI}b`)).toBe(true);
  });

  test('clipText adds the mark only when it cut', () => {
    expect(clipText(`ab${EMOJI}`, 3)).toBe('ab…');
    expect(clipText(`ab${EMOJI}`, 4)).toBe(`ab${EMOJI}`);
    expect(clipText('abcdef', 3, '[cut]')).toBe('abc[cut]');
  });

  test('property: a well-formed text stays well-formed, is a prefix, and loses at most one unit beyond max', () => {
    const text = fc.array(fc.oneof(fc.constantFrom('a', 'é', EMOJI, '\u{20000}', '👍🏽'), fc.string({ unit: 'binary', maxLength: 3 })), { maxLength: 40 }).map((a) => a.join(''));
    fc.assert(
      fc.property(text, fc.integer({ min: 0, max: 90 }), (s, max) => {
        const out = cutText(s, max);
        expect(wellFormed(out)).toBe(true);
        expect(s.startsWith(out)).toBe(true);
        if (s.length <= max) expect(out).toBe(s);
        else expect([max - 1, max]).toContain(out.length);
      }),
    );
  });
});

describe('the cuts InterLock makes', () => {
  test('a parser message with an emoji at each cut point stays well-formed', () => {
    for (let pad = 0; pad < 30; pad++) {
      const near = 'x'.repeat(pad) + EMOJI.repeat(20);
      const raw = `syntax error at or near "${near}" ${'y'.repeat(pad)}${EMOJI.repeat(100)}`;
      expect(wellFormed(safeParserMessage(raw))).toBe(true);
    }
  });

  test("an approval failure's stored server message (2000 characters) stays well-formed", () => {
    const cause = failureCause(Object.assign(new Error('x'), { code: 'execution_failed', sqlState: '23505', cause: { code: '23505', message: 'a'.repeat(1999) + EMOJI + 'tail', detail: 'd'.repeat(1999) + EMOJI } }));
    expect(cause.message).toBe('a'.repeat(1999));
    expect(cause.detail).toBe('d'.repeat(1999));
  });
});
