"""Array declarations: each array parameter's element type and shape, declared on the spec.

A spec class may declare, as the class attribute ``arrays``, what each pointer
parameter of its kernel points to, in baked fields, scalar launch arguments and the
launch's grid::

    arrays = {
        "x": "dtype[rows, hidden]",            # a baked DType field, a .param, a baked int
        "residual": "dtype[rows, hidden] if fused_residual else None",
        "scale": "f32[grid.x, hidden / 128]",  # a DType name; CTAs along x; ceil division
        "positions": "int64[tokens]",
    }

The grammar is a small part of Python's expression syntax, parsed once with :mod:`ast`
when the class is defined (:func:`parse_arrays`):

* a declaration is ``TYPE[DIM, ...]``, ``None`` (no such parameter for this request),
  or ``DECL if CONDITION else DECL``;
* ``TYPE`` is a :class:`~specdsl.DType` name (``bf16``, ``f32``, ``e4m3``, ``int64``) or
  a baked ``DType`` field;
* a ``DIM`` is an integer literal, a baked ``int`` field, an integer scalar ``.param``
  of the kernel (the value of this launch's argument), ``grid.x``/``grid.y``/``grid.z``
  (the launch's grid, in CTAs), or ``A * B`` or ``A / B`` of those (``/`` rounds up: a
  tile touched in part counts; a baked field of 1 drops out: ``grid.x / split`` reads
  ``grid.x`` where ``split`` is 1);
* a ``CONDITION`` reads baked fields only: ``flag``, ``not flag``, ``field == value``,
  ``field != value`` or ``field in (value, ...)``.

Launch fields are refused everywhere: they never reach the PTX, so what the kernel touches
cannot depend on them. Names that are no field are taken to be scalar ``.param``\\ s and are
checked against the kernel's ``.entry`` when its module is loaded
(:mod:`specdsl._runtime.arraychecks`).
"""

from __future__ import annotations

import ast
import enum
import typing
from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

from ..errors import SpecDefinitionError, SpecError
from .dtype import DType
from .fields import BAKED

__all__ = ["ArrayDeclarations", "Declared", "Dim", "parse_arrays", "GRID_AXES"]

#: The grid's axes as a declaration names them (``grid.x``).
GRID_AXES = ("x", "y", "z")

# Expression nodes, as tuples (cheap to fold and to hash):
#   ("int", n) | ("field", name) | ("param", name) | ("grid", axis) | ("mul", a, b)
#   | ("cdiv", a, b)
Dim = tuple[Any, ...]


class Declared(NamedTuple):
    """One array parameter's declaration, resolved for one request.

    Attributes:
        name: the parameter's name.
        dtype: its element type.
        dims: its shape: expressions left with ``("int", n)``, ``("param", name)``,
            ``("grid", axis)``, ``("mul", a, b)`` and ``("cdiv", a, b)`` (baked fields
            folded to their values).
        text: the declaration as written (``"dtype[rows, hidden]"``).
    """

    name: str
    dtype: DType
    dims: tuple[Dim, ...]
    text: str

    def shown(self, values: Mapping[str, int] | None = None) -> str:
        """The shape with this request's values: ``bf16[rows, 4096]``, or with ``values``
        (parameter and grid names to ints) ``bf16[64, 4096]``."""
        return f"{self.dtype.value}[{', '.join(_show(d, values) for d in self.dims)}]"


@attrs.frozen
class ArrayDeclarations:
    """A spec class's parsed ``arrays`` (see the module docstring).

    Attributes:
        owner: the class's name, for messages.
        declarations: ``{parameter: (node, text)}`` as parsed.
    """

    owner: str
    declarations: Mapping[str, tuple[Any, str]]

    def resolve(self, spec: Any) -> dict[str, Declared | None]:
        """``{parameter: Declared, or None where the request has no such parameter}`` for
        ``spec``: conditions decided and baked fields folded to their values."""
        resolved: dict[str, Declared | None] = {}
        for name, (node, text) in self.declarations.items():
            while node[0] == "if":
                _, condition, then, otherwise = node
                node = then if _holds(condition, spec) else otherwise
            if node[0] == "none":
                resolved[name] = None
                continue
            _, source, dims = node
            dtype = getattr(spec, source[1]) if source[0] == "field" else source[1]
            resolved[name] = Declared(name, dtype, tuple(_fold(d, spec) for d in dims), text)
        return resolved


def parse_arrays(owner: str, arrays: Any, fields: Mapping[str, tuple[str, Any]]
                 ) -> ArrayDeclarations:
    """Parse a spec class's ``arrays`` mapping (see the module docstring).

    Args:
        owner: the class's name, for messages.
        arrays: ``{parameter name: declaration text}``.
        fields: ``{field name: (role, type hint)}`` of the class.

    Raises:
        SpecDefinitionError: naming the class, the parameter and the bad name or syntax.
    """
    if not isinstance(arrays, Mapping):
        raise SpecDefinitionError(f"{owner}.arrays must be a dict of parameter name to "
                                  f"declaration text (got {type(arrays).__qualname__})")
    declarations: dict[str, tuple[Any, str]] = {}
    for name, text in arrays.items():
        where = f"{owner}.arrays[{name!r}]"
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecDefinitionError(f"{owner}.arrays: {name!r} is not a parameter name")
        if not isinstance(text, str):
            raise SpecDefinitionError(f"{where} must be a str such as 'f32[rows, hidden]' "
                                      f"(got {text!r})")
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as exc:
            raise SpecDefinitionError(f"{where}: {text!r} does not parse: {exc.msg}") from None
        declarations[name] = (_Parser(where, fields).declaration(tree), text.strip())
    return ArrayDeclarations(owner, declarations)


class _Parser:
    """Turns one declaration's syntax tree into nodes, refusing what the grammar lacks."""

    def __init__(self, where: str, fields: Mapping[str, tuple[str, Any]]) -> None:
        self.where, self.fields = where, fields

    def fail(self, what: str) -> SpecDefinitionError:
        return SpecDefinitionError(f"{self.where}: {what}")

    def declaration(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and node.value is None:
            return ("none",)
        if isinstance(node, ast.IfExp):
            return ("if", self.condition(node.test), self.declaration(node.body),
                    self.declaration(node.orelse))
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return ("array", self.element(node.value.id), tuple(self.dim(d) for d in items))
        raise self.fail(f"{ast.unparse(node)!r} is no declaration: write TYPE[DIM, ...] "
                        f"(e.g. 'f32[rows, hidden]'), None, or DECL if CONDITION else DECL")

    def element(self, name: str) -> tuple[str, Any]:
        if name in self.fields:
            role, hint = self.fields[name]
            if role != BAKED or not (isinstance(hint, type) and issubclass(hint, DType)):
                raise self.fail(f"element type {name!r} is a field but not a baked DType field")
            return ("field", name)
        try:
            return ("dtype", DType.parse(name))
        except SpecError:
            raise self.fail(f"element type {name!r} is neither a DType name (f32, bf16, "
                            f"e4m3, int64, ...) nor a baked DType field") from None

    def dim(self, node: ast.expr) -> Dim:
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
            return ("int", node.value)
        if isinstance(node, ast.Name):
            if node.id == "grid":
                raise self.fail("'grid' is read by axis: grid.x, grid.y or grid.z")
            if node.id in self.fields:
                role, hint = self.fields[node.id]
                if role != BAKED:
                    raise self.fail(f"{node.id!r} is a launch field: launch fields never "
                                    f"reach the PTX, so a shape cannot depend on them")
                if hint is not int:
                    raise self.fail(f"dimension {node.id!r} is a baked field but not an int")
                return ("field", node.id)
            return ("param", node.id)  # a scalar .param: checked when the module loads
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == "grid" and node.attr in GRID_AXES:
            return ("grid", GRID_AXES.index(node.attr))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            op = "mul" if isinstance(node.op, ast.Mult) else "cdiv"
            return (op, self.dim(node.left), self.dim(node.right))
        raise self.fail(f"dimension {ast.unparse(node)!r} is none of: a non-negative int, a "
                        f"baked int field, an integer .param, grid.x/y/z, A * B, A / B")

    def condition(self, node: ast.expr) -> tuple[Any, ...]:
        if isinstance(node, ast.Name):
            return ("truthy", self.baked(node.id))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and \
                isinstance(node.operand, ast.Name):
            return ("not", self.baked(node.operand.id))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                isinstance(node.left, ast.Name):
            name, (op,), (right,) = self.baked(node.left.id), node.ops, node.comparators
            if isinstance(op, (ast.Eq, ast.NotEq)):
                return ("eq" if isinstance(op, ast.Eq) else "ne", name, self.value(name, right))
            if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                return ("in", name, tuple(self.value(name, v) for v in right.elts))
        raise self.fail(f"condition {ast.unparse(node)!r} is none of: FIELD, not FIELD, "
                        f"FIELD == VALUE, FIELD != VALUE, FIELD in (VALUE, ...)")

    def baked(self, name: str) -> str:
        if name not in self.fields or self.fields[name][0] != BAKED:
            raise self.fail(f"a condition reads baked fields only; {name!r} is none")
        return name

    def value(self, name: str, node: ast.expr) -> Any:
        if not isinstance(node, ast.Constant):
            raise self.fail(f"{ast.unparse(node)!r} is not a literal value")
        value, hint = node.value, self.fields[name][1]
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            try:
                return hint(value)  # DType("bf16"), an Enum's own value
            except (ValueError, SpecError):
                raise self.fail(f"{value!r} is no value of {name!r} "
                                f"({', '.join(repr(m.value) for m in hint)})") from None
        allowed = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else None
        if allowed is not None and value not in allowed:
            raise self.fail(f"{value!r} is no value of {name!r} "
                            f"({', '.join(map(repr, allowed))})")
        return value


def _holds(condition: tuple[Any, ...], spec: Any) -> bool:
    kind, name = condition[0], condition[1]
    value = getattr(spec, name)
    if kind == "truthy":
        return bool(value)
    if kind == "not":
        return not value
    if kind == "eq":
        return bool(value == condition[2])
    if kind == "ne":
        return bool(value != condition[2])
    return value in condition[2]


def _fold(dim: Dim, spec: Any) -> Dim:
    """``dim`` with baked fields replaced by their values, constant parts computed, and a
    product or quotient by 1 dropped (``grid.x / split`` at ``split=1`` is ``grid.x``)."""
    kind = dim[0]
    if kind == "field":
        return ("int", int(getattr(spec, dim[1])))
    if kind in ("mul", "cdiv"):
        left, right = _fold(dim[1], spec), _fold(dim[2], spec)
        if left[0] == "int" and right[0] == "int":
            return ("int", apply(kind, left[1], right[1]))
        if right == ("int", 1):
            return left
        if kind == "mul" and left == ("int", 1):
            return right
        return (kind, left, right)
    return dim


def apply(kind: str, left: int, right: int) -> int:
    """``left * right`` or ``ceil(left / right)`` (``kind`` ``"mul"`` or ``"cdiv"``); a
    division by zero counts nothing touched (0)."""
    if kind == "mul":
        return left * right
    return -(-left // right) if right else 0


def _show(dim: Dim, values: Mapping[str, int] | None) -> str:
    kind = dim[0]
    if kind == "int":
        return str(dim[1])
    if kind == "param":
        return str(values[dim[1]]) if values and dim[1] in values else dim[1]
    if kind == "grid":
        label = f"grid.{GRID_AXES[dim[1]]}"
        return str(values[label]) if values and label in values else label
    symbol = " * " if kind == "mul" else " / "
    left, right = (_show(d, values) if d[0] not in ("mul", "cdiv") else f"({_show(d, values)})"
                   for d in dim[1:])
    return f"{left}{symbol}{right}"
