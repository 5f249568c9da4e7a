"""Benchmarks: each prints its figures and the ratio against a baseline measured in the same run."""
