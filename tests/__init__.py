"""The test suite; a package so ``tests.helpers`` imports without sys.path tricks."""
