"""Tandem's model zoo (zoo/catalog.py): the models its tests and benchmarks train."""
