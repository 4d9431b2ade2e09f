"""Array checks: a request's array declarations turned into checks of one kernel's launches.

A spec's ``arrays`` (:mod:`specdsl._spec.arrays`) are resolved for the request that built a
module and matched against the kernel's parsed ``.entry`` signature once, when the module
is built, by any executor, compile-only ones included (:func:`plan_arrays`, kept as
``Module.arrays``; ``specdsl verify`` runs it too): every declared name must be a ``.ptr``
parameter, every name a shape reads an integer scalar ``.param``. Each declared pointer
parameter then gets an :class:`ArrayCheck`, which every launch applies to an argument that
carries an element type and a size (torch and CuPy arrays, DLPack and
``__cuda_array_interface__`` objects, cuda.core ``Buffer``\\ s, which carry a size in bytes
only). A device pointer given as an ``int`` carries neither and is not checked.

Why the request that built the module: equal module keys mean identical PTX, and what a
kernel touches is a property of its PTX and its launch arguments (both paths of
:mod:`specdsl._runtime.launchers` and :mod:`specdsl._runtime._speedups` run these checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .._spec.arrays import GRID_AXES, Declared, Dim, apply
from .._spec.decorator import spec_info
from .._spec.dtype import DType
from ..errors import SpecDefinitionError
from .signature import EntrySignature

__all__ = ["ArrayCheck", "ArrayFacts", "plan_arrays", "element_name", "ELEMENT_NAMES",
           "OP_CONST", "OP_PARAM", "OP_GRID", "OP_MUL", "OP_CDIV"]

#: The operations of an extent program (:attr:`ArrayCheck.program`), as the compiled
#: launch path reads them: ``(op, operand)`` pairs run on a stack.
OP_CONST, OP_PARAM, OP_GRID, OP_MUL, OP_CDIV = 0, 1, 2, 3, 4

# An element type's names as torch and NumPy spell them (torch.float8_e4m3fn is the OCP
# E4M3 format of PTX's .e4m3, PTX ISA 5.2.3); DType.numpy adds the unsigned integer that
# carries bf16 and FP8 bits where a library lacks those types (NumPy, CuPy).
_NAMES = {DType.F32: "float32", DType.F16: "float16", DType.BF16: "bfloat16",
          DType.F8E4M3: "float8_e4m3fn", DType.F8E5M2: "float8_e5m2", DType.F64: "float64",
          DType.I32: "int32", DType.U32: "uint32", DType.I8: "int8", DType.U8: "uint8",
          DType.I64: "int64", DType.U64: "uint64"}


class ArrayFacts(NamedTuple):
    """What a pointer argument carries (:mod:`specdsl._runtime.readers`).

    Attributes:
        address: its device address.
        device: the device it lives on, or ``None`` where it says none.
        problem: why it cannot be launched with (empty when it can).
        element: its element type's name (``"bfloat16"``), ``""`` where it carries none (a
            ``Buffer``), or a phrase saying why it cannot be named.
        elements: its element count, or ``None``.
        nbytes: its size in bytes where it carries no element type (a ``Buffer``), or ``None``.
    """

    address: int
    device: int | None
    problem: str
    element: str = ""
    elements: int | None = None
    nbytes: int | None = None


#: ``{element type object: its name}`` of the element types met so far (torch dtypes,
#: NumPy dtypes): the inline checks look an array's ``dtype`` up here.
ELEMENT_NAMES: dict[Any, str] = {}


def element_name(dtype: Any) -> str:
    """The name of an array's element type object, as torch and NumPy spell it:
    ``torch.bfloat16`` -> ``"bfloat16"``, ``numpy.dtype("<f4")`` -> ``"float32"``; a
    big-endian NumPy dtype is named as such (``"big-endian float32"``). Remembered in
    :data:`ELEMENT_NAMES`."""
    try:
        return ELEMENT_NAMES[dtype]
    except (KeyError, TypeError):  # new, or unhashable
        pass
    if type(dtype).__module__.partition(".")[0] == "torch":
        name = str(dtype).rpartition(".")[2]
    else:
        name = str(getattr(dtype, "name", dtype))
        if getattr(dtype, "byteorder", "") == ">":
            name = f"big-endian {name}"
    try:
        if len(ELEMENT_NAMES) < 1024:  # element types are few; anything else is not kept
            ELEMENT_NAMES[dtype] = name
    except TypeError:
        pass
    return name


class ArrayCheck(NamedTuple):
    """The checks of one declared pointer parameter.

    Attributes:
        position: the parameter's position.
        declared: its resolved declaration.
        accepted: element type names it takes: the DType's own, and for bf16 and the FP8
            formats the unsigned integer of their width that carries their bits.
        size: bytes per element (what a ``Buffer``'s size is divided by).
        program: the element count this launch touches, as ``(op, operand)`` pairs
            (``OP_*``): constants, scalar parameters by index, grid axes, products and
            ceiling divisions.
        names: ``{parameter index: name}`` of the scalar parameters the shape reads.
    """

    position: int
    declared: Declared
    accepted: frozenset[str]
    size: int
    program: tuple[tuple[int, int], ...]
    names: dict[int, str]

    def takes(self, element: str) -> bool:
        """Whether an array of ``element``\\ s (a name from :func:`element_name`) is taken."""
        return element in self.accepted

    def expected_elements(self) -> str:
        """``"bf16 elements (bfloat16, or uint16 holding their bits; declared x:
        dtype[rows, hidden])"``: what a refusal of the element type says was expected."""
        dtype = self.declared.dtype
        names = _NAMES[dtype]
        if dtype.numpy != names:
            names += f", or {dtype.numpy} holding their bits"
        return f"{dtype.value} elements ({names}; declared {self._declaration()})"

    def required(self, values: Sequence[Any], grid: Sequence[int] | None) -> int:
        """The element count this launch touches, from the checked ``values`` of the
        kernel's parameters and the launch's ``grid`` (in CTAs).

        Raises:
            ValueError: the shape reads the grid and none is given.
        """
        stack: list[int] = []
        for op, operand in self.program:
            if op == OP_CONST:
                stack.append(operand)
            elif op == OP_PARAM:
                stack.append(int(values[operand]))
            elif op == OP_GRID:
                if grid is None:
                    raise ValueError(f"{self.declared.name}: its shape reads the grid; pass it")
                stack.append(int(grid[operand]))
            else:
                right = stack.pop()
                stack.append(apply("mul" if op == OP_MUL else "cdiv", stack.pop(), right))
        return stack[0]

    def expected_extent(self, values: Sequence[Any], grid: Sequence[int] | None,
                        count: int, in_bytes: bool) -> str:
        """What a refusal of the extent says was expected: ``"at least 262144 elements
        (declared y: dtype[rows, hidden] = bf16[64, 4096] for this launch)"``; in bytes
        for an argument that carries no element type (a ``Buffer``)."""
        shown = {name: int(values[i]) for i, name in self.names.items()}
        if grid is not None:
            shown.update({f"grid.{axis}": int(g) for axis, g in zip(GRID_AXES, grid,
                                                                     strict=False)})
        need = f"{count * self.size} bytes ({count} elements)" if in_bytes else \
            f"{count} elements"
        return (f"at least {need} (declared {self._declaration()} = "
                f"{self.declared.shown(shown)} for this launch)")

    def _declaration(self) -> str:
        return f"{self.declared.name}: {self.declared.text}"


def plan_arrays(spec: Any, signature: EntrySignature) -> tuple[ArrayCheck | None, ...]:
    """One :class:`ArrayCheck` (or ``None``) per parameter of ``signature``, from the
    array declarations of ``spec``, the request that built the module.

    Raises:
        SpecDefinitionError: a declared name that is no ``.ptr`` parameter of the entry, or
            a shape that reads a name that is neither a baked int field nor an integer
            scalar ``.param``; the message names the class and the name.
    """
    info = spec_info(spec)
    checks: list[ArrayCheck | None] = [None] * len(signature.params)
    if info.arrays is None:
        return tuple(checks)
    owner = type(spec).__qualname__
    index = {param.name: i for i, param in enumerate(signature.params)}
    pointers = [p.name for p in signature.params if p.is_ptr]
    scalars = {p.name: i for i, p in enumerate(signature.params)
               if not p.is_ptr and p.count is None and p.kind in "usb"}
    for name, declared in info.arrays.resolve(spec).items():
        where = f"{owner}.arrays[{name!r}]"
        if declared is None:  # no such parameter for this request
            continue
        if name not in index or not signature.params[index[name]].is_ptr:
            raise SpecDefinitionError(
                f"{where}: {signature.entry} has no .ptr parameter {name!r} for this request "
                f"(its pointers: {', '.join(pointers) or 'none'}); declare it "
                f"'... if CONDITION else None' where a request has no such parameter")
        names: dict[int, str] = {}
        program: list[tuple[int, int]] = []
        for position, dim in enumerate(declared.dims):
            _compile(dim, scalars, names, program, where)
            if position:
                program.append((OP_MUL, 0))
        dtype = declared.dtype
        checks[index[name]] = ArrayCheck(index[name], declared,
                                         frozenset({_NAMES[dtype], dtype.numpy}), dtype.size,
                                         tuple(program), names)
    return tuple(checks)


def _compile(dim: Dim, scalars: dict[str, int], names: dict[int, str],
             program: list[tuple[int, int]], where: str) -> None:
    kind = dim[0]
    if kind == "int":
        program.append((OP_CONST, dim[1]))
    elif kind == "grid":
        program.append((OP_GRID, dim[1]))
    elif kind == "param":
        if dim[1] not in scalars:
            raise SpecDefinitionError(
                f"{where}: {dim[1]!r} is neither a baked int field nor an integer .param "
                f"(integer .params: {', '.join(scalars) or 'none'})")
        names[scalars[dim[1]]] = dim[1]
        program.append((OP_PARAM, scalars[dim[1]]))
    else:
        _compile(dim[1], scalars, names, program, where)
        _compile(dim[2], scalars, names, program, where)
        program.append((OP_MUL if kind == "mul" else OP_CDIV, 0))
