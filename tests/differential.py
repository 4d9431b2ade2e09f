"""Test helpers for differential GPU tests: torch tensors from exact NumPy bit patterns,
and a comparison against float64 references that checks special values exactly.

Inputs are built on the host with :func:`specdsl.kernels.case.to_bits` (round to the
dtype once), so the float64 reference sees exactly the rounded inputs the kernel reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specdsl._spec.dtype import DType
from specdsl.kernels.case import from_bits, to_bits

__all__ = ["to_device", "poisoned", "to_host", "rounded", "compare", "run_rmsnorm", "run_softmax",
           "run_fp8_quant", "run_silu_mul", "run_rope", "run_quantized"]

_TORCH = {DType.F32: "float32", DType.F16: "float16", DType.BF16: "bfloat16",
          DType.F8E4M3: "float8_e4m3fn"}
# torch has no uint16/uint8 views of every type in every version: move bits as these
_CARRIER = {DType.BF16: (np.int16, "int16"), DType.F8E4M3: (np.uint8, "uint8")}


def to_device(torch: Any, bits: np.ndarray, dtype: DType) -> Any:
    """A CUDA tensor of ``dtype`` holding NumPy storage ``bits`` (as made by ``to_bits``)."""
    if dtype in _CARRIER:
        numpy_type, _ = _CARRIER[dtype]
        return torch.from_numpy(np.ascontiguousarray(bits).view(numpy_type)).view(
            getattr(torch, _TORCH[dtype])).cuda()
    return torch.from_numpy(np.ascontiguousarray(bits)).cuda()


def poisoned(torch: Any, shape: tuple[int, ...], dtype: DType) -> Any:
    """An output tensor of ``dtype`` filled with 0xFF bytes: NaN in every float format,
    so an element the kernel never writes cannot pass."""
    out = torch.empty(shape, dtype=getattr(torch, _TORCH[dtype]), device="cuda")
    out.view(torch.uint8).fill_(0xFF)
    return out


def to_host(torch: Any, tensor: Any, dtype: DType) -> np.ndarray:
    """The tensor's values as float64 (bf16 and fp8 decoded from their bits)."""
    if dtype in _CARRIER:
        _, torch_type = _CARRIER[dtype]
        raw = tensor.view(getattr(torch, torch_type)).cpu().numpy()
        storage = raw.view(np.uint16) if dtype is DType.BF16 else raw
        return from_bits(storage, dtype)
    return tensor.cpu().numpy().astype(np.float64)


def rounded(ref: np.ndarray, dtype: DType) -> np.ndarray:
    """``ref`` rounded to ``dtype`` once (nearest even; past the largest finite value:
    inf, or +-448 for fp8 E4M3, which saturates); NaN stays NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = from_bits(to_bits(ref, dtype), dtype)
    return np.where(np.isnan(ref), np.nan, out)


def compare(out: np.ndarray, ref: np.ndarray, dtype: DType, tolerance: float,
            what: str = "") -> None:
    """Assert ``out`` (the kernel's, float64) matches the float64 reference ``ref``.

    NaN positions must be the same as ``ref``'s; infinities the same, sign included,
    as ``ref`` rounded to ``dtype`` (an overflow to inf is compared exactly); finite
    elements, per row (last axis), within ``max(tolerance, 2 * e)`` relative L2 error,
    where ``e`` is the error of ``ref`` rounded to ``dtype`` (rounding subnormal
    results costs more than ``tolerance`` allows).

    Raises:
        AssertionError: naming ``what``, the row and the first positions that differ.
    """
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, f"{what}: shape {out.shape}, reference {ref.shape}"
    expected = rounded(ref, dtype)
    for name, got, want in (("NaN", np.isnan(out), np.isnan(expected)),
                            ("+inf", out == np.inf, expected == np.inf),
                            ("-inf", out == -np.inf, expected == -np.inf)):
        wrong = np.argwhere(got != want)
        assert not len(wrong), (f"{what}: {name} at {len(wrong)} positions where the "
                                f"reference differs, first {wrong[:4].tolist()}: "
                                f"kernel {out[tuple(wrong[0])]}, reference "
                                f"{expected[tuple(wrong[0])]}")
    finite = np.isfinite(out) & np.isfinite(expected) & np.isfinite(ref)
    rows_out = np.where(finite, out, 0.0).reshape(-1, out.shape[-1])
    rows_ref = np.where(finite, ref, 0.0).reshape(-1, out.shape[-1])
    rows_rounded = np.where(finite, expected, 0.0).reshape(-1, out.shape[-1])
    for row, (o, r, rr) in enumerate(zip(rows_out, rows_ref, rows_rounded, strict=True)):
        norm = np.linalg.norm(r)
        scale = norm if norm > 0 else 1.0
        error = np.linalg.norm(o - r) / scale
        allowed = max(tolerance, 2 * np.linalg.norm(rr - r) / scale)
        assert error <= allowed, (f"{what}: row {row} relative error {error:.3g} > "
                                  f"{allowed:.3g} (worst element {int(np.argmax(abs(o - r)))}: "
                                  f"kernel {o[np.argmax(abs(o - r))]!r}, reference "
                                  f"{r[np.argmax(abs(o - r))]!r})")


def _launch(executor: Any, torch: Any, spec: Any, args: list[Any], count: int) -> None:
    grid, block = spec.launch_dims(count)
    torch.cuda.synchronize()
    executor.launch(spec, *args, grid=grid, block=block)
    torch.cuda.synchronize()


def run_rmsnorm(executor: Any, torch: Any, spec: Any, x: np.ndarray, weight: np.ndarray,
                residual: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """RMSNorm on ``x`` ``[rows, hidden]`` (values exact in ``spec.dtype``): ``y``, and
    with ``fused_residual`` the ``residual`` it wrote back."""
    dt = spec.dtype
    args = [to_device(torch, to_bits(x, dt), dt)]
    if spec.fused_residual:
        args.append(to_device(torch, to_bits(residual, dt), dt))
    y = poisoned(torch, x.shape, dt)
    args += [to_device(torch, to_bits(weight, dt), dt), y, np.uint32(x.shape[0])]
    _launch(executor, torch, spec, args, x.shape[0])
    out = {"y": to_host(torch, y, dt)}
    if spec.fused_residual:
        out["residual"] = to_host(torch, args[1], dt)
    return out


def run_softmax(executor: Any, torch: Any, spec: Any, x: np.ndarray) -> np.ndarray:
    """Softmax of ``x`` ``[rows, cols]`` (values exact in ``spec.dtype``): ``y``."""
    dt = spec.dtype
    y = poisoned(torch, x.shape, dt)
    _launch(executor, torch, spec, [to_device(torch, to_bits(x, dt), dt), y,
                                    np.uint32(x.shape[0])], x.shape[0])
    return to_host(torch, y, dt)


def run_fp8_quant(executor: Any, torch: Any, spec: Any, x: np.ndarray,
                  scale: float | None = None) -> dict[str, np.ndarray]:
    """Fp8Quant of ``x`` ``[tokens, hidden]``: decoded codes ``q``, and ``scale`` (the
    per-token or per-group output for dynamic and group; ``scale`` is the f32 passed for
    static_param)."""
    dt = spec.dtype
    q = poisoned(torch, x.shape, DType.F8E4M3)
    args = [to_device(torch, to_bits(x, dt), dt), q]
    if spec.scale_mode == "dynamic":
        args.append(poisoned(torch, (x.shape[0],), DType.F32))
    elif spec.scale_mode == "group":
        args.append(poisoned(torch, (x.shape[0], x.shape[1] // 128), DType.F32))
    elif spec.scale_mode == "static_param":
        args.append(torch.tensor([scale], dtype=torch.float32, device="cuda"))
    _launch(executor, torch, spec, args, x.shape[0])
    out = {"q": to_host(torch, q, DType.F8E4M3)}
    if spec.scale_mode in ("dynamic", "group"):
        out["scale"] = to_host(torch, args[2], DType.F32)
    return out


def run_silu_mul(executor: Any, torch: Any, spec: Any, x: np.ndarray) -> np.ndarray:
    """SiluMul of ``x`` ``[tokens, 2d]``: ``out`` ``[tokens, d]``."""
    dt = spec.dtype
    out = poisoned(torch, (x.shape[0], spec.d), dt)
    _launch(executor, torch, spec, [to_device(torch, to_bits(x, dt), dt), out,
                                    np.uint32(x.shape[0])], x.shape[0])
    return to_host(torch, out, dt)


def run_rope(executor: Any, torch: Any, spec: Any, q: np.ndarray, k: np.ndarray,
             positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RoPE in place on ``q`` ``[tokens, q_heads, head_dim]`` and ``k``: the rotated pair."""
    dt = spec.dtype
    q_dev, k_dev = to_device(torch, to_bits(q, dt), dt), to_device(torch, to_bits(k, dt), dt)
    positions_dev = torch.from_numpy(np.asarray(positions, dtype=np.int64)).cuda()
    _launch(executor, torch, spec, [q_dev, k_dev, positions_dev, np.uint32(q.shape[0])],
            q.shape[0])
    return to_host(torch, q_dev, dt), to_host(torch, k_dev, dt)


def run_quantized(executor: Any, torch: Any, spec: Any, inputs: list[Any], rows: int,
                  hidden: int, scales: tuple[int, ...] | float) -> dict[str, np.ndarray]:
    """Launch a fused quantizing row kernel (RMSNormQuant, SiluMulQuant) whose ``.param``
    list is ``inputs`` (device tensors, in order), then ``q`` ``[rows, hidden]``,
    ``scale`` and ``rows`` (u32): ``scales`` is the shape of the scale output, or the
    static f32 scale to pass. Returns decoded ``q`` and the ``scale`` output, if any."""
    q = poisoned(torch, (rows, hidden), DType.F8E4M3)
    if isinstance(scales, tuple):
        scale = poisoned(torch, scales, DType.F32)
    else:
        scale = torch.tensor([scales], dtype=torch.float32, device="cuda")
    _launch(executor, torch, spec, [*inputs, q, scale, np.uint32(rows)], rows)
    out = {"q": to_host(torch, q, DType.F8E4M3)}
    if isinstance(scales, tuple):
        out["scale"] = to_host(torch, scale, DType.F32)
    return out
