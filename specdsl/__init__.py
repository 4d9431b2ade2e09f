"""specdsl: typed PTX kernel specs with derived, provable module-cache keys.

A kernel is a frozen attrs class whose *baked* fields render into PTX through a
Jinja template and whose *launch* fields never do. Module keys are derived from
the baked fields, the template and the target, so they cannot be incomplete;
hand-written keys are proven at run time by a ledger and before run time by
``specdsl check-keys``.

This module re-exports the public API (``__all__``). The other public modules are
:mod:`specdsl.errors`, :mod:`specdsl.config`, :mod:`specdsl.review`,
:mod:`specdsl.speedups`, :mod:`specdsl.kernels` (with :mod:`specdsl.kernels.case`) and
:mod:`specdsl.torch`; every module or package whose name starts with ``_`` is private.
``docs/architecture.md`` draws the layers they form.
"""

# First: under `python -m specdsl` it takes the working folder off sys.path, so that
# nothing lying there shadows what specdsl imports next.
from ._cli import working_folder as _working_folder  # noqa: F401
from ._proof.ledger import KeyLedger
from ._proof.switch import checking_enabled, key_checking, proof_suspended, suspend_key_proof
from ._render.keys import derived_key, hand_key, key_inputs
from ._render.render import render
from ._runtime.compile import CompileOptions
from ._runtime.executor import Executor
from ._runtime.streams import TORCH_CURRENT_STREAM
from ._spec.decorator import baked_values, kernel_spec, launch_values
from ._spec.dtype import DType
from ._spec.fields import baked, launch
from ._spec.target import Target
from ._version import __version__
from .errors import (
    CacheDirError,
    CacheWarning,
    CheckingSwitchError,
    CompileError,
    ConfigError,
    IncompleteKeyError,
    LaunchError,
    NotASpecError,
    PTXSignatureError,
    RenderError,
    SpecArgumentError,
    SpecDefinitionError,
    SpecdslError,
    SpecError,
    TargetError,
    TemplatesMissingError,
    UnknownVariableWarning,
    UnreadFieldWarning,
    UnsupportedTargetError,
)

__all__ = [
    "kernel_spec", "baked", "launch", "DType", "Target", "baked_values", "launch_values",
    "render", "derived_key", "hand_key", "key_inputs",
    "key_checking", "suspend_key_proof", "checking_enabled", "proof_suspended", "KeyLedger",
    "Executor", "CompileOptions", "TORCH_CURRENT_STREAM",
    "SpecdslError", "SpecError", "SpecArgumentError", "SpecDefinitionError", "NotASpecError",
    "TargetError", "RenderError", "UnsupportedTargetError", "TemplatesMissingError",
    "CompileError", "PTXSignatureError", "LaunchError", "IncompleteKeyError",
    "CheckingSwitchError", "CacheDirError", "ConfigError", "UnreadFieldWarning", "CacheWarning",
    "UnknownVariableWarning", "__version__",
]
