"""Conventions every built-in kernel keeps: launch_dims and bytes_moved, one ceiling
division, one tolerance table."""

from __future__ import annotations

import re

import pytest

from specdsl import render
from specdsl._review.variants import representative_request
from specdsl.kernels import ALL
from specdsl.kernels._rows import cdiv
from specdsl.kernels.case import TOLERANCE


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.__name__)
def test_launch_dims_and_bytes_moved(cls):
    """Every built-in gives (grid, block) for a count of rows or elements, with the block
    its PTX requires (.reqntid) where it declares one, and a positive byte count."""
    spec = representative_request(cls)
    grid, block = spec.launch_dims(5)
    assert len(grid) == 3 and all(isinstance(d, int) and d >= 1 for d in grid)
    required = re.search(r"\.reqntid (\d+)", render(spec))
    if required:
        assert block == (int(required.group(1)), 1, 1)
    assert spec.bytes_moved(5) > 0 and spec.bytes_moved(10) > spec.bytes_moved(5)


@pytest.mark.parametrize("a,b", [(0, 1), (1, 1), (7, 2), (8, 2), (2**70 + 1, 3), (5, 32)])
def test_cdiv(a, b):
    """cdiv is the exact ceiling of a / b, also past float precision."""
    assert cdiv(a, b) == (a + b - 1) // b


def test_no_other_ceiling_division():
    """The kernel modules divide rounding up through cdiv only (no -(-a // b) spelled out)."""
    from pathlib import Path

    import specdsl.kernels as package

    for path in Path(package.__file__).parent.glob("*.py"):
        text = path.read_text()
        assert "-(-" not in text or (path.name == "_rows.py" and text.count("-(-") == 1), path


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.__name__)
def test_examples_use_the_tolerance_table(cls):
    """Each kernel's example allows TOLERANCE of its output's dtype (Softmax: at least
    that), so accuracy claims come from one table."""
    import importlib

    import numpy as np

    spec = representative_request(cls)
    module = importlib.import_module(cls.__module__)
    case = module.example(spec, np.random.default_rng(0))
    output = next(value for _, value in case.args if hasattr(value, "shape") and
                  type(value).__name__ == "Output")
    assert case.tolerance >= TOLERANCE[output.dtype]
    assert case.tolerance == TOLERANCE[output.dtype] or cls.__name__ == "Softmax"
