"""specdsl: typed PTX kernel specs with derived, provable module-cache keys.

A kernel is a frozen attrs class whose *baked* fields render into PTX through a
Jinja template and whose *launch* fields never do. Module keys are derived from
the baked fields, the template and the target, so they cannot be incomplete;
hand-written keys are proven at run time by a ledger and before run time by
``specdsl check-keys``.
"""

# First: under `python -m specdsl` it takes the working folder off sys.path, so that
# nothing lying there shadows what specdsl imports next.
from . import working_folder as _working_folder  # noqa: F401
from .compile import CompileOptions
from .dtype import DType
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
    UnreadFieldWarning,
    UnsupportedTargetError,
)
from .executor import Executor
from .fields import baked, launch
from .keys import derived_key, hand_key
from .ledger import KeyLedger, key_checking, suspend_key_proof
from .render import render
from .spec import kernel_spec
from .target import Target

__version__ = "0.1.0"

__all__ = [
    "kernel_spec", "baked", "launch", "DType", "Target",
    "render", "derived_key", "hand_key",
    "key_checking", "suspend_key_proof", "KeyLedger",
    "Executor", "CompileOptions",
    "SpecdslError", "SpecError", "SpecArgumentError", "SpecDefinitionError", "NotASpecError",
    "TargetError", "RenderError", "UnsupportedTargetError", "TemplatesMissingError",
    "CompileError", "PTXSignatureError", "LaunchError", "IncompleteKeyError",
    "CheckingSwitchError", "CacheDirError", "ConfigError", "UnreadFieldWarning", "CacheWarning",
]
