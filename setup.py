"""The optional compiled launch path; the rest is in pyproject.toml.

Two extensions, built together or not at all (specdsl/_runtime/speedups.py imports the first,
which imports the second): ``specdsl._runtime._driverlaunch`` (a kernel's checks, packing
and cuLaunchKernel) and ``specdsl._runtime._speedups`` (the launch path over it).
setuptools runs Cython on the ``.pyx`` files (a build requirement) and compiles the C with
the platform's compiler; they include no CUDA header. ``optional=True``: where no compiler
is found, the install goes on with a warning and specdsl launches through its plain-Python
path.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension(f"specdsl._runtime.{name}", [f"specdsl/_runtime/{name}.pyx"], optional=True)
    for name in ("_driverlaunch", "_speedups")
])
