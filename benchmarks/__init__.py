"""Benchmarks run by `make bench` (`python -m benchmarks`): each prints figures, none is a timed test."""
