"""Conventions every built-in kernel keeps: launch_dims and bytes_moved, one ceiling
division, one tolerance table."""

from __future__ import annotations

import re

import numpy as np
import pytest

from specdsl import SpecError, render
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


def _lengths(longest: int) -> list[int]:
    """Row lengths that reach every block and chunk rule: 1 to 2048 each, then a stride
    of 61 (odd, so every vector width comes up), and each power of two from 4096, with its
    neighbours, up to ``longest``."""
    powers = {p + d for e in range(12, 21) for p in (2**e,) for d in (-8, -1, 0, 1, 8)}
    return sorted(n for n in set(range(1, 2049)) | set(range(2049, longest + 1, 61)) | powers
                  if n <= longest)


#: Each row kernel's length field, its longest accepted length and the other choices a
#: request may name besides ``block``.
ROW_KERNELS = {
    "RMSNorm": ("hidden", 2**20, [{"fused_residual": f} for f in (False, True)]),
    "Softmax": ("cols", 262144, [{"split": s} for s in range(1, 9)]),
    "Fp8Quant": ("hidden", 2**20, [{"scale_mode": m} for m in ("dynamic", "static_param",
                                                               "group")]),
    "RMSNormQuant": ("hidden", 65536, [{"scale_mode": m, "fused_residual": f}
                                       for m in ("dynamic", "group") for f in (False, True)]),
    "SiluMulQuant": ("d", 65536, [{"scale_mode": m} for m in ("dynamic", "group")]),
}


@pytest.mark.parametrize("name", ROW_KERNELS)
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_defaults_fit_every_accepted_request(name, dtype):
    """A request that names only the shape and other fields (split, scale mode, residual)
    is never refused for its default block: any refusal names a field the request chose."""
    import specdsl.kernels as kernels
    from specdsl import SpecError

    cls = getattr(kernels, name)
    field, longest, choices = ROW_KERNELS[name]
    refused_blocks = []
    for length in _lengths(longest):
        for choice in choices:
            try:
                cls(**{field: length, "dtype": dtype, **choice})
            except SpecError as error:
                if f"{name}.block" in str(error):
                    refused_blocks.append((length, choice, str(error)))
    assert not refused_blocks, refused_blocks[:3]


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_suggested_split_is_always_accepted(dtype):
    """Softmax's suggested_split never suggests a split (or a default block) the spec
    refuses, for any row length and row count."""
    from specdsl.kernels import Softmax
    from specdsl.kernels.softmax import MAX_COLS, suggested_split

    for cols in _lengths(MAX_COLS):
        for rows in (1, 2, 16, 17, 33, 34, 60, 61, 66, 67, 132, 133, 4096):
            split = suggested_split(cols, dtype, rows)
            spec = Softmax(cols=cols, dtype=dtype, split=split)
            assert spec.chunks == 1 or split == 1


def test_cluster_split_bounds():
    """_rows.cluster_split: the largest split whose bound (a fraction of the SM count) the
    rows keep within and that cuts the row into parts of a warp's 32 vectors or more, that
    the kernel takes; 1 for short rows, no rows, no SMs and past every bound."""
    from fractions import Fraction

    from specdsl.kernels._rows import cluster_split

    def split(vectors, rows, sm_count=132, takes=lambda s: True, **bounds):
        return cluster_split(vectors, rows, sm_count, takes, min_vectors=256, **bounds)

    assert [split(1024, rows) for rows in (1, 33, 34, 60, 61, 66, 67)] == [8, 8, 4, 4, 2, 2, 1]
    assert [split(1024, rows, sm_count=64) for rows in (16, 17, 29, 30, 32, 33)] == [
        8, 4, 4, 2, 2, 1]
    assert split(255, 1) == 1 and split(1024, 0) == 1 and split(1024, 1, sm_count=0) == 1
    assert split(1028, 1) == 4 and split(1026, 1) == 2 and split(1025, 1) == 1  # what cuts
    assert split(256, 1, takes=lambda s: s != 8) == 4   # the kernel refuses 8
    assert cluster_split(248, 1, 132, lambda s: True, min_vectors=1) == 4  # 8 parts of 31
    assert split(1024, 16, rows_per_sm={8: Fraction(1, 8)}) == 8
    assert split(1024, 17, rows_per_sm={8: Fraction(1, 8)}) == 1


@pytest.mark.parametrize("name", ["RMSNorm", "Softmax"])
@pytest.mark.parametrize("rows", [2, 4])
def test_a_rows_per_cta_default_is_never_refused(name, rows, monkeypatch):
    """With ROWS_PER_CTA switched to 2 or 4 (the one-line change a benchmark may call for),
    the rows_per_cta default still fits every length: fewer rows where the registers cannot
    hold that many, 1 for chunked or split rows."""
    import importlib

    import specdsl.kernels as kernels
    from specdsl import SpecError

    home = {"RMSNorm": "rmsnorm", "Softmax": "_softmax_layout"}[name]  # where the default is read
    monkeypatch.setattr(importlib.import_module(f"specdsl.kernels.{home}"), "ROWS_PER_CTA", rows)
    cls = getattr(kernels, name)
    field, longest, choices = ROW_KERNELS[name]
    chosen = set()
    for length in _lengths(longest)[::5]:
        for dtype in ("bf16", "f32"):
            for choice in choices:
                try:
                    spec = cls(**{field: length, "dtype": dtype, **choice})
                except SpecError as error:
                    assert f"{name}.rows_per_cta" not in str(error) and \
                        f"{name}.block" not in str(error), str(error)
                    continue
                chosen.add(spec.rows_per_cta)
    assert rows in chosen and 1 in chosen


#: Requests beyond the variants that reach other declarations: each scale mode of the FP8
#: kernels, narrow and odd rows, rows a CTA, chunked and windowed rows of each dtype, Softmax
#: split over a cluster.
_MORE_REQUESTS = [
    *(("RMSNormQuant", {"hidden": h, "dtype": d, "scale_mode": m, "fused_residual": f})
      for h in (4096, 4097, 4098, 4100, 16384) for d in ("bf16", "f16", "f32")
      for m in ("dynamic", "static", "group") for f in (False, True)
      if h % 128 == 0 or m != "group"),
    *(("SiluMulQuant", {"d": n, "dtype": d, "scale_mode": m})
      for n in (4096, 4097, 4098) for d in ("bf16", "f16", "f32")
      for m in ("dynamic", "static", "group") if n % 128 == 0 or m != "group"),
    *(("Fp8Quant", {"hidden": h, "dtype": d, "scale_mode": m})
      for h in (4096, 4097, 131072, 131073) for d in ("bf16", "f16", "f32")
      for m in ("dynamic", "static_param", "group") if h % 128 == 0 or m != "group"),
    *(("RMSNorm", {"hidden": h, "dtype": d, "fused_residual": f, **extra})
      for h in (4096, 4097, 131073) for d in ("bf16", "f16", "f32") for f in (False, True)
      for extra in ({}, {"rows_per_cta": 2}) if not (extra and h != 4096)),
    *(("Softmax", {"cols": c, "dtype": d, **extra})
      for c in (4096, 4097, 50257, 131072) for d in ("bf16", "f16", "f32")
      for extra in ({}, {"split": 4}) if not (extra and c < 131072)),
    *(("Softmax", {"cols": c, "dtype": d, "rows_per_cta": 2})
      for c in (4096, 2080) for d in ("bf16", "f32")),
]


def test_every_declared_register_is_used():
    """A rendered entry declares only registers it uses: each ``.reg`` name (``%amax``) is
    named again, and each family (``%h<2>``) has a member (``%h0``) in the PTX, over every
    variant of every built-in and the requests above. ptxas drops unused registers, so this
    is for the reviewer reading the PTX (templates declare per request what it uses)."""
    import specdsl.kernels as kernels
    from specdsl._review.variants import spec_variants

    requests = [spec for cls in ALL for spec in spec_variants(cls)]
    requests += [getattr(kernels, name)(**fields) for name, fields in _MORE_REQUESTS]
    unused = set()
    for spec in requests:
        ptx = render(spec)
        for family, count in re.findall(r"\.reg\s+\.\w+\s+(%\w+)<(\d+)>\s*;", ptx):
            if int(count) and not re.search(re.escape(family) + r"\d+\b", ptx):
                unused.add(f"{family}<{count}> in {spec!r}")
        for name in re.findall(r"\.reg\s+\.\w+\s+(%\w+)\s*;", ptx):
            if len(re.findall(re.escape(name) + r"(?![\w<])", ptx)) < 2:
                unused.add(f"{name} in {spec!r}")
    assert len(requests) == 386
    assert not unused, sorted(unused)[:5]


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.__name__)
def test_launch_dims_takes_an_int(cls):
    """Every built-in's launch_dims takes an int (a NumPy integer too, with the same dims,
    in Python ints) and refuses a float, a bool or a string with a SpecError naming the
    kernel and the value: SiluMul, RoPE and Fp8Quant made grids of floats or of True."""
    spec = representative_request(cls)
    dims = spec.launch_dims(7)
    assert spec.launch_dims(np.int64(7)) == dims
    assert all(type(n) is int for n in (*dims[0], *dims[1]))
    for value in (2.5, True, "3"):
        with pytest.raises(SpecError, match=rf"{cls.__name__} \w+ = {re.escape(repr(value))} "
                                            rf"is invalid: expected an int"):
            spec.launch_dims(value)


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.__name__)
def test_bytes_moved_takes_a_count(cls):
    """Every built-in's bytes_moved takes an int of 0 or more (a NumPy integer too, with the
    same answer) and refuses others naming the method and the value: a negative count gave
    negative bytes, a float a float."""
    spec = representative_request(cls)
    assert spec.bytes_moved(np.int64(7)) == spec.bytes_moved(7) > 0
    assert spec.bytes_moved(0) >= 0
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.bytes_moved: \w+ must be 0 or more "
                                         rf"\(got -1\)"):
        spec.bytes_moved(-1)
    with pytest.raises(TypeError, match=rf"{cls.__name__}\.bytes_moved: \w+ must be an int "
                                        rf"\(got 1\.5\)"):
        spec.bytes_moved(1.5)
