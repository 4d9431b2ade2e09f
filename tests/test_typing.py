"""What a user's type checker sees: @kernel_spec classes type-check as frozen dataclasses.

Runs mypy (from the test extra; skipped where it is missing) on a user's module and
compares the lines it reports with the lines marked ``# error`` there.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]

USER_MODULE = textwrap.dedent('''\
    from specdsl import DType, baked, kernel_spec, launch
    from specdsl.kernels import RMSNorm, VectorAdd


    @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
    class MyAdd:
        dtype: DType = baked(DType.F32)
        block: int = launch(256)


    add, norm = VectorAdd(dtype=DType.BF16, block=128), RMSNorm(hidden=4096, eps=1e-6)
    mine = [MyAdd(DType.F16), MyAdd(dtype=DType.F16, block=64)]
    dtype: DType = add.dtype
    hidden: int = norm.hidden
    VectorAdd(dtpye=DType.F16)  # error: a misspelled field
    MyAdd(blok=64)  # error: a misspelled field
    MyAdd(dtype=DType.F16).block = 32  # error: requests are frozen
    ''')


def test_user_module_type_checks_as_mypy_reads_it(tmp_path, monkeypatch):
    """mypy --strict accepts field keywords and positions and reports exactly the lines
    marked as errors: misspelled fields and an assignment to a field."""
    module = tmp_path / "user_specs.py"
    module.write_text(USER_MODULE)
    monkeypatch.setenv("MYPYPATH", str(ROOT))  # specdsl from this checkout
    out, err, _ = mypy_api.run([
        "--strict", "--follow-imports=silent", "--no-error-summary",
        "--cache-dir", str(tmp_path / "cache"), str(module)])
    reported = sorted({int(line) for line in re.findall(r"^\S*user_specs\.py:(\d+): error",
                                                        out, re.MULTILINE)})
    marked = [number for number, line in enumerate(USER_MODULE.splitlines(), 1)
              if "# error" in line]
    assert reported == marked, out + err
