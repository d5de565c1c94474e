"""Benchmarks for gpu-guard (run by hand, never by the test suite): see bench/README.md."""
