// A file in which no test runs (node-tests.test.mjs): a run of it alone must fail.
export const nothing = true;
