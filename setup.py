"""The optional C traversal (analysis/_speedups.c). Everything else is configured in pyproject.toml.

``optional=True``: where no C compiler is available the build goes on without it and
``ddp_lint.analysis.semantic`` uses its pure-Python traversal (same results, slower)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ddp_lint.analysis._speedups", ["analysis/_speedups.c"], optional=True)])
