"""Every environment variable specdsl reads, declared once, typed, with one parsing rule each.

Code reads ``knobs.cache_dir``, ``knobs.check_keys``, ... and never ``os.environ``: the
variable's name, its type, its default and what it does live here and nowhere else
(``docs/environment.md`` is the user's copy of this table, and a test keeps them equal).
Each read parses the variable anew, so a value set after import is seen; callers that
sit on a hot path read once and keep the result (the key-checking switch, the launch
path an executor takes).

The rules, shared by every variable:

- unset and empty (``NAME=``) both mean "not set": the default applies;
- a **switch** accepts ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``
  in any case, with surrounding blanks ignored;
- anything else is a :class:`~specdsl.errors.ConfigError` naming the variable, the
  value and what it accepts.
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar, overload

from .errors import ConfigError, UnknownVariableWarning

__all__ = ["knobs", "Knobs", "Knob", "variables", "parse_switch", "parse_size", "parse_cap",
           "bare_cap_problem", "parse_folder", "unknown_variables", "warn_unknown_variables",
           "OFF", "ON", "DEFAULT_CACHE_MAX_BYTES", "SMALLEST_BARE_CAP"]

T = TypeVar("T")

#: Spellings of "on" and "off" a switch accepts (compared in lower case).
ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")
_SWITCH = "1/0, true/false, yes/no or on/off (any case)"

#: The disk cache's size cap unless ``SPECDSL_CACHE_MAX_BYTES`` says otherwise: 1 GiB.
DEFAULT_CACHE_MAX_BYTES = 1 << 30

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)


def parse_switch(name: str, text: str) -> bool:
    """``True`` or ``False`` for a switch's text (see the module docstring).

    Raises:
        ConfigError: any other text; the message names ``name`` and ``text``.
    """
    word = text.strip().lower()
    if word in ON:
        return True
    if word in OFF:
        return False
    raise ConfigError(f"{name} must be {_SWITCH}, or unset (got {text!r})")


def parse_size(name: str, text: str) -> int | None:
    """A size in bytes: digits, optionally followed by ``K``, ``M``, ``G`` or ``T`` (powers
    of 1024; ``KiB``, ``MB``... are read the same); an off word (``0``, ``off``...) or
    ``none`` means "no limit" (``None``).

    Raises:
        ConfigError: anything else, or a size that is not whole bytes.
    """
    word = text.strip().lower()
    if word in OFF or word == "none":
        return None
    match = _SIZE.fullmatch(word)
    if match is None:
        raise ConfigError(f"{name} must be a size in bytes such as 1073741824, 512M or 4G, "
                          f"or off/0/none for no limit (got {text!r})")
    return int(match[1]) * _UNITS[(match[2] or "").lower()]


#: A unit-less cap below this many bytes (1 MiB) is refused (:func:`parse_cap`): a cubin
#: takes several KiB or more, so such a cap holds a handful of modules at most and empties
#: the cache at almost every check; digits that small were meant with a unit (4 as 4G).
SMALLEST_BARE_CAP = 1 << 20


def parse_cap(name: str, text: str) -> int | None:
    """:func:`parse_size`, for a cache's size cap: digits with no unit below
    :data:`SMALLEST_BARE_CAP` (``4``, meant as ``4G``; ``4096``, meant as ``4096M``) are
    refused (:func:`bare_cap_problem`); a unit says such a size was meant (``100B``,
    ``512K``).

    Raises:
        ConfigError: what :func:`parse_size` refuses, or such a bare number.
    """
    size = parse_size(name, text)
    problem = bare_cap_problem(text, size)
    if problem is not None:
        raise ConfigError(f"{name}={problem}")
    return size


def bare_cap_problem(text: str, size: int | None, off: bool = True) -> str | None:
    """What is wrong with ``text``, a cap :func:`parse_size` read as ``size`` bytes, when it
    is digits alone below :data:`SMALLEST_BARE_CAP` (``"4 is 4 bytes, under 1 MiB, ..."``,
    with the units to give, and with ``off`` the words for no cap); ``None`` for any other
    cap."""
    word = text.strip()
    if size is None or size >= SMALLEST_BARE_CAP or not word.isdigit():
        return None
    big, small = ("G", "M") if size < 1024 else ("M", "K")  # 4: 4G; 4096: 4096M
    return (f"{word} is {size} bytes, under 1 MiB, which holds a handful of cached modules "
            f"at most: give a unit, such as {word}{big} or {word}{small} (or {word}B if bytes "
            f"are meant)" + (", or off/0/none for no limit" if off else ""))


def parse_folder(name: str, text: str,
                 default: str = "unset for the default folder") -> Path | None:
    """A folder (``~`` expanded), or ``None`` for an off word (``off``, ``0``, ``false``,
    ``no``, ``none``). ``default`` says how the default folder is asked for where ``name``
    is given (a variable is unset; an argument is None).

    Raises:
        ConfigError: a switch-on word (``1``, ``true``, ``yes``, ``on``): a switch typed
            where a folder was meant.
    """
    word = text.strip().lower()
    if word in OFF or word == "none":
        return None
    if word in ON:  # "1" or "yes" is a switch typed where a folder was meant
        raise ConfigError(f"{name} must name a folder, or be off/0/false/no/none to turn the "
                          f"disk cache off, or {default} (got {text!r})")
    return Path(text.strip()).expanduser()


def _parse_xdg_folder(name: str, text: str) -> Path | None:
    # "All paths set in these environment variables must be absolute. If an implementation
    # encounters a relative path in any of these variables it should consider the path
    # invalid and ignore it." (XDG Base Directory Specification 0.8)
    path = Path(text.strip()).expanduser()
    return path if path.is_absolute() else None


def _default_cache_dir() -> Path:
    base = knobs.xdg_cache_home
    return (base if base is not None else Path("~/.cache").expanduser()) / "specdsl"


class Knob(Generic[T]):
    """One environment variable: its name, type, default, parsing rule and meaning.

    A data descriptor on :class:`Knobs`: ``knobs.name`` reads and parses the variable.

    Attributes:
        name: the variable, e.g. ``"SPECDSL_CACHE_DIR"``.
        type: the type as the docs spell it (``"switch"``, ``"size"``, ...).
        default: what applies when it is unset, as the docs spell it.
        doc: what it does.
    """

    def __init__(self, name: str, parse: Callable[[str, str], T], default: Callable[[], T],
                 *, type: str, default_text: str, doc: str) -> None:
        self.name = name
        self.type = type
        self.default = default_text
        self.doc = doc
        self._parse = parse
        self._default = default

    def parse(self, text: str | None) -> T:
        """The value ``text`` (the variable's raw value, ``None`` when unset) stands for.

        Raises:
            ConfigError: ``text`` is not a value of this variable.
        """
        if text is None or not text.strip():
            return self._default()
        return self._parse(self.name, text)

    def raw(self) -> str | None:
        """The variable's text as set now, or ``None``."""
        return os.environ.get(self.name)

    def is_set(self) -> bool:
        """Whether the variable holds a value (empty counts as unset)."""
        text = self.raw()
        return text is not None and bool(text.strip())

    @overload
    def __get__(self, obj: None, owner: type) -> Knob[T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> T: ...

    def __get__(self, obj: object, owner: type) -> T | Knob[T]:
        if obj is None:
            return self
        return self.parse(self.raw())


class Knobs:
    """The environment, read through typed attributes (the one instance is :data:`knobs`).

    Reading an attribute parses its variable now and raises
    :class:`~specdsl.errors.ConfigError` for a value it cannot take.
    """

    cache_dir: Knob[Path | None] = Knob(
        "SPECDSL_CACHE_DIR", parse_folder, _default_cache_dir,
        type="folder, or off", default_text="$XDG_CACHE_HOME/specdsl (~/.cache/specdsl)",
        doc="The disk cache folder (cubins, rendered PTX, compiled templates, template facts). "
            "off, 0, false, no or none turns every specdsl cache off; 1, true, yes and on "
            "are refused (a switch where a folder was meant). An Executor's cache_dir= "
            "argument wins over it.")
    cache_max_bytes: Knob[int | None] = Knob(
        "SPECDSL_CACHE_MAX_BYTES", parse_cap, lambda: DEFAULT_CACHE_MAX_BYTES,
        type="size", default_text="1G (1 GiB)",
        doc="The disk cache's size cap. Past it, the entries read least recently are removed "
            "(checked on a process's first write and every 64th after, and by specdsl cache "
            "prune). Digits with an optional K, M, G or T suffix (powers of 1024); off, 0 or "
            "none: no cap. Digits alone below 1048576 (1 MiB) are refused (4 is 4 bytes: "
            "4G was meant); a unit says a small size is meant (512K, 100B).")
    check_keys: Knob[bool | None] = Knob(
        "SPECDSL_CHECK_KEYS", parse_switch, lambda: None,
        type="switch", default_text="on, off under python -O",
        doc="Whether the key ledger proves hand-written module keys at run time. Wins over the "
            "pytest plugin's default and over __debug__; read once, on first use "
            "(specdsl._proof.switch.reread_environment reads it again), and checked when an "
            "Executor is made.")
    pure_python: Knob[bool] = Knob(
        "SPECDSL_PURE_PYTHON", parse_switch, lambda: False,
        type="switch", default_text="off",
        doc="Launch through the plain-Python path even where the compiled one "
            "(specdsl._runtime._speedups) is built. Read when an Executor is made.")
    xdg_cache_home: Knob[Path | None] = Knob(
        "XDG_CACHE_HOME", _parse_xdg_folder, lambda: None,
        type="folder", default_text="~/.cache",
        doc="The per-user cache root of the XDG Base Directory specification; the default "
            "disk cache folder is specdsl inside it. A relative path is ignored (the "
            "specification calls it invalid), so ~/.cache applies.")


#: The environment, read through typed attributes.
knobs = Knobs()


def variables() -> tuple[Knob[object], ...]:
    """Every variable specdsl reads, in declaration order."""
    return tuple(value for value in vars(Knobs).values() if isinstance(value, Knob))


#: The prefix of specdsl's own variables: any other name under it is a misspelling.
PREFIX = "SPECDSL_"
_warned: set[str] = set()


#: A word in a ``SPECDSL_CACHE_*`` name and the variable it means: the spelling alone can be
#: closer to the other one (``SPECDSL_CACHE_SIZE`` is nearer ``SPECDSL_CACHE_DIR``).
_CACHE_WORDS = {"SIZE": "SPECDSL_CACHE_MAX_BYTES", "LIMIT": "SPECDSL_CACHE_MAX_BYTES",
                "CAP": "SPECDSL_CACHE_MAX_BYTES", "BYTES": "SPECDSL_CACHE_MAX_BYTES",
                "MAX": "SPECDSL_CACHE_MAX_BYTES", "DIRECTORY": "SPECDSL_CACHE_DIR",
                "FOLDER": "SPECDSL_CACHE_DIR", "PATH": "SPECDSL_CACHE_DIR"}


def unknown_variables() -> dict[str, str]:
    """``{name: the variable it misspells}`` for each ``SPECDSL_*`` variable set in the
    environment that specdsl does not read but that is close to one it does
    (``SPECDSL_CACHE_DIRECTORY``: ``SPECDSL_CACHE_DIR``; a ``SPECDSL_CACHE_*`` name by what
    its words mean, ``SPECDSL_CACHE_SIZE``: ``SPECDSL_CACHE_MAX_BYTES``). Names close to none
    are left alone: a tool of the user's own may read them (the test suite's
    ``SPECDSL_UPDATE_GOLDEN``)."""
    known = [knob.name for knob in variables()]
    found = {}
    for name in sorted(os.environ):
        if name.startswith(PREFIX) and name not in known:
            closest = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            if closest and name.startswith(f"{PREFIX}CACHE_"):
                meant = [_CACHE_WORDS[w] for w in name.split("_")[2:] if w in _CACHE_WORDS]
                closest = meant[:1] or closest
            if closest:
                found[name] = closest[0]
    return found


def warn_unknown_variables() -> None:
    """An :class:`~specdsl.errors.UnknownVariableWarning` for each misspelt ``SPECDSL_*``
    variable (:func:`unknown_variables`), once per name and process: it has no effect, and
    nothing else would say so."""
    for name, closest in unknown_variables().items():
        if name not in _warned:
            _warned.add(name)
            warnings.warn(f"specdsl: {name} is no variable specdsl reads, so it has no "
                          f"effect; did you mean {closest}? (docs/environment.md lists "
                          "them)", UnknownVariableWarning, stacklevel=3)
