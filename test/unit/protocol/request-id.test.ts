/** Request ids: "req_" + 12 base64url characters (72 random bits), drawn from a pooled CSPRNG buffer, never repeated. */
import { newRequestId } from '../../../src/protocol/dispatch';

test('request ids keep their format and do not repeat across pool refills', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 5000; i++) {
    const id = newRequestId();
    expect(id).toMatch(/^req_[A-Za-z0-9_-]{12}$/);
    seen.add(id);
  }
  expect(seen.size).toBe(5000);
});
