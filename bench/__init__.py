"""Benchmarks (DESIGN §8), not tests: `./dev bench <name>` or `python -m bench <name>`."""
