/**
 * Machine-readable reports of a run, for CI systems: JSON (the RunReport itself, with the SQL pack's
 * results when that profile ran) and JUnit XML (one testsuite per profile, one testcase per rule, a
 * failure element carrying the counterexample text).
 */
import type { Profile } from './profiles';
import type { RuleCheck } from './run';

/** One rule's verdict in the shape both formats share. */
export interface ReportCase {
  rule: string;
  profile: Profile;
  passed: boolean;
  skipped?: string;
  /** The first failure, as printed for people. */
  failure?: string;
}

/** Turns protocol rule checks into report cases. */
export function casesOf(checks: RuleCheck[]): ReportCase[] {
  return checks.map((c) => ({ rule: c.rule, profile: c.profile, passed: c.passed, skipped: c.skipped, failure: c.passed ? undefined : (c.counterexample ?? c.details.find((d) => !d.passed)?.name) }));
}

/** Escapes text for an XML attribute or element; drops characters XML 1.0 cannot carry. */
export function xmlEscape(s: string): string {
  return s
    // eslint-disable-next-line no-control-regex
    .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;');
}

/** Renders cases as a JUnit XML document (testsuites → testsuite per profile → testcase per rule). */
export function toJUnit(cases: ReportCase[], name = 'interlock-conformance'): string {
  const byProfile = new Map<string, ReportCase[]>();
  for (const c of cases) byProfile.set(c.profile, [...(byProfile.get(c.profile) ?? []), c]);
  const total = (f: (c: ReportCase) => boolean) => cases.filter(f).length;
  const lines = ['<?xml version="1.0" encoding="UTF-8"?>', `<testsuites name="${xmlEscape(name)}" tests="${cases.length}" failures="${total((c) => !c.passed)}" skipped="${total((c) => !!c.skipped)}">`];
  for (const [profile, list] of byProfile) {
    lines.push(`  <testsuite name="${xmlEscape(profile)}" tests="${list.length}" failures="${list.filter((c) => !c.passed).length}" skipped="${list.filter((c) => !!c.skipped).length}">`);
    for (const c of list) {
      const open = `    <testcase classname="${xmlEscape(profile)}" name="${xmlEscape(c.rule)}"`;
      if (c.skipped) lines.push(`${open}><skipped message="${xmlEscape(c.skipped)}"/></testcase>`);
      else if (c.passed) lines.push(`${open}/>`);
      else lines.push(`${open}><failure message="${xmlEscape(`rule ${c.rule} failed`)}">${xmlEscape(c.failure ?? '')}</failure></testcase>`);
    }
    lines.push('  </testsuite>');
  }
  lines.push('</testsuites>');
  return lines.join('\n') + '\n';
}
