/** Jest configuration: @swc/jest transforms TypeScript; `tsc --noEmit` type-checks separately (npm run typecheck). */
const transform = { '^.+\\.(t|j)s$': ['@swc/jest', { jsc: { parser: { syntax: 'typescript' }, target: 'es2022' }, module: { type: 'commonjs' } }] };
const common = { transform, testEnvironment: 'node', moduleFileExtensions: ['ts', 'js', 'json'] };
module.exports = {
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/test/unit/**/*.test.ts'] },
    { ...common, displayName: 'conformance', testMatch: ['<rootDir>/test/conformance/**/*.test.ts'] },
    // One up-front check that the test PostgreSQL answers (test/helpers/pg-global-setup.ts): run only when a test of these projects is selected.
    { ...common, displayName: 'integration', testMatch: ['<rootDir>/test/integration/**/*.test.ts'], globalSetup: '<rootDir>/test/helpers/pg-global-setup.ts' },
    { ...common, displayName: 'e2e', testMatch: ['<rootDir>/test/e2e/**/*.test.ts'], globalSetup: '<rootDir>/test/helpers/pg-global-setup.ts' },
  ],
  testTimeout: 60000,
};
