// A file that fails as it loads, before any test (node-tests.test.mjs): a run of it fails.
throw new Error("broken on purpose");
