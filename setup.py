"""The optional compiled launch path, specdsl._runtime._speedups; the rest is in pyproject.toml.

setuptools runs Cython on the ``.pyx`` (a build requirement) and compiles the C with the
platform's compiler. ``optional=True``: where none is found, the install goes on with a
warning and specdsl launches through its plain-Python path (see specdsl/_runtime/speedups.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("specdsl._runtime._speedups", ["specdsl/_runtime/_speedups.pyx"],
                             optional=True)])
