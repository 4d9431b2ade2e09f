"""The error classes of specdsl.

Every error shares the root :class:`SpecdslError`; each subclass is also the
built-in exception it resembles, so ``except ValueError`` keeps working for
callers that do not know specdsl.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SpecdslError",
    "SpecError",
    "SpecArgumentError",
    "SpecDefinitionError",
    "NotASpecError",
    "TargetError",
    "RenderError",
    "UnsupportedTargetError",
    "TemplatesMissingError",
    "CompileError",
    "PTXSignatureError",
    "LaunchError",
    "IncompleteKeyError",
    "CheckingSwitchError",
    "CacheDirError",
    "UnreadFieldWarning",
    "ConfigError",
    "CacheWarning",
    "UnknownVariableWarning",
]


class SpecdslError(Exception):
    """Root of every error specdsl raises."""


class SpecError(SpecdslError, ValueError):
    """A request (spec instance) has a field value that is not allowed, or a value meant
    for a field cannot be read (``DType.parse("f12")``).

    The message names the spec class, the field, the value and what was
    expected, e.g. ``RMSNorm.hidden must be a multiple of 8 (got 4100)``.
    """


class SpecArgumentError(SpecError, TypeError):
    """A request was made with a missing required field, an unknown field name, a field
    given twice or too many positional values: ``RMSNorm()``, ``RMSNorm(hiden=4096)``.

    The message names the class and the fields. A :class:`SpecError` (so a
    ``ValueError``) like every refused request, and still the ``TypeError`` Python
    raises for a bad call, for callers written before it existed.
    """


class SpecDefinitionError(SpecdslError, TypeError):
    """A spec class is malformed: raised at class definition (import time).

    Examples: a field without a role, a template that does not exist, a
    template that reads a launch field or an unknown variable.
    """


class NotASpecError(SpecdslError, TypeError):
    """An object that is no :func:`~specdsl.kernel_spec` class or request was given where
    one is needed (``spec_info(3)``); a ``TypeError``, as it was before it had a class."""


class TargetError(SpecdslError, ValueError):
    """A compile target string such as ``"sm_90a"`` cannot be parsed or is unsupported."""


class RenderError(SpecdslError, ValueError):
    """A template could not render PTX for a request.

    Raised for values a PTX type cannot hold (an f32 immediate that overflows),
    for a template's own ``require(...)`` failures and for Jinja errors.
    """


class UnsupportedTargetError(RenderError):
    """A request the target cannot run: its template's ``require_target(...)`` failed
    (e.g. a bf16 add on sm_80). ``specdsl verify`` and ``render --out`` report such a
    request as skipped for that target, not as a failure.

    Attributes:
        reason: the template's message alone (the error's text also names the request).
        request: the request refused, where known (``render`` sets it), else None.
        target: the target refused, as ``sm_89``, where known, else None.
    """

    def __init__(self, message: str, reason: str | None = None, *, request: Any = None,
                 target: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason
        self.request = request
        self.target = target


class TemplatesMissingError(SpecdslError, RuntimeError):
    """specdsl's own templates are not where the installation put them (a broken
    install): reinstall specdsl. A ``RuntimeError``, as it was before it had a class."""


class CompileError(SpecdslError, RuntimeError):
    """nvJitLink rejected rendered PTX.

    Attributes:
        log: the compiler's log, as text.
        spec: the request whose PTX failed, or ``None``.
        ptx: the PTX that was compiled.
        excerpt: the PTX lines around the line the log reports (may be empty).
    """

    def __init__(self, message: str, *, log: str = "", spec: object = None,
                 ptx: str = "", excerpt: str = "") -> None:
        super().__init__(message)
        self.log = log
        self.spec = spec
        self.ptx = ptx
        self.excerpt = excerpt


class PTXSignatureError(SpecdslError, ValueError):
    """A kernel's ``.entry`` or one of its ``.param`` declarations cannot be read from
    the PTX (:func:`specdsl._runtime.signature.parse_entry`): no such entry, or a
    declaration that is not PTX. The message quotes the declaration. A ``ValueError``, as
    it was before it had a class."""


class LaunchError(SpecdslError, ValueError):
    """A launch was refused before anything reached the GPU.

    The message names the kernel parameter (or grid/block/stream) and what was
    expected.
    """


class IncompleteKeyError(SpecdslError, RuntimeError):
    """A hand-written module key maps two requests that render different PTX.

    A parameter that is baked into the PTX is missing from the key: without this
    error the second request would silently run the first request's kernel.

    Attributes:
        key: the hand-written key that was hit.
        first: the request that was compiled under ``key``.
        request: the new request whose PTX differs.
        differing_fields: names of the baked fields whose values differ.
    """

    def __init__(self, message: str, *, key: str, first: object, request: object,
                 differing_fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.key = key
        self.first = first
        self.request = request
        self.differing_fields = tuple(differing_fields)


class CheckingSwitchError(SpecdslError, ValueError):
    """``SPECDSL_CHECK_KEYS`` holds something other than a switch word (``1``/``0``,
    ``true``/``false``, ``yes``/``no``, ``on``/``off``); the message is the one a
    :class:`ConfigError` for any other variable would carry.
    """


class CacheDirError(SpecdslError, OSError):
    """The disk cache folder cannot be used (not a folder, or unsafe).
    """


class UnreadFieldWarning(UserWarning):
    """A baked field that the template (with everything it reaches) never reads.

    Every value of such a field renders the same PTX under its own derived key:
    redundant compiles. Make it a ``launch(...)`` field, or read it in the template.
    """


class UnknownVariableWarning(UserWarning):
    """A ``SPECDSL_*`` environment variable that specdsl does not read, most likely a
    misspelling (``SPECDSL_CACHE_DIRECTORY`` for ``SPECDSL_CACHE_DIR``): it has no effect.
    Warned once per name and process, when an executor is made or a command starts."""


class ConfigError(SpecdslError, ValueError):
    """A setting holds a value specdsl cannot take: a ``SPECDSL_*`` environment variable
    (``SPECDSL_PURE_PYTHON=maybe``), a field of an options object
    (``CompileOptions(max_registers=8)``) or an executor's argument (``cache_dir=""``,
    ``ensure_module(spec, key="  ")``).

    The message names the variable or field, the value and what is accepted; see
    ``docs/environment.md`` for every variable.
    """


class CacheWarning(RuntimeWarning):
    """A specdsl cache cannot be used as it is, and specdsl carries on without it.

    Raised as a warning, once per folder and problem: a folder others can write (made
    private), a folder that cannot be created or written (a read-only or full disk), or
    one that is refused (another user's). The cache is only a speed-up: rendering,
    compiling and launching work the same without it.
    """
