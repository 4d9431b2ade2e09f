"""The ``specdsl`` command line (argparse): parsing, dispatch and its contract.

The contract (``docs/cli.md``, held by ``tests/test_cli.py``):

- exit 0: done; exit 1: the command found a problem (``diff`` a difference, ``verify`` a
  failed request, ``check-keys`` an incomplete key); exit 2: a user error, printed as one
  line ``specdsl VERB: error: ...`` on stderr. Never a traceback.
- Options may come before or after the SPEC and field words, in every verb.
- A malformed ``SPECDSL_*`` variable is a user error in every verb (exit 2); specdsl's own
  warnings are one line ``specdsl: warning: ...`` (:mod:`specdsl._cli.notices`).
- A reader that goes away (``specdsl diff ... | head``) ends the output, not the command:
  the exit status stays the command's own.
- A user module (``mymod:MySpec``) found nowhere else is imported from the working
  folder; nothing there ever shadows the standard library or an installed package
  (:mod:`specdsl._cli.working_folder`).

The verbs' work is done by library modules that return data; :mod:`specdsl._cli.review`
and :mod:`specdsl._cli.keys` print it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._spec.target import Target
from ..errors import SpecdslError, UnreadFieldWarning, UnsupportedTargetError
from .folders import render_folder_argument
from .notices import apply_warning_options, check_environment, one_line_warnings
from .user_modules import describe_exception, in_specdsl

__all__ = ["main", "build_parser", "OK", "FOUND", "ERROR"]

#: Exit statuses: done; the command found a problem; a user error (one line on stderr).
OK, FOUND, ERROR = 0, 1, 2

# In `specdsl diff`, the '--' between request A's words and request B's is replaced by this
# word before parsing: argparse drops a '--' (differently across Python versions) but keeps
# this word in place among the others. No command-line word can hold a NUL.
B_WORDS = "\0--"


class UsageError(SpecdslError):
    """A command line the parser or a verb refuses: printed as ``PROG: error: MESSAGE``.

    Raised by :func:`build_parser`'s parsers instead of argparse's usage block and exit;
    :func:`main` turns it into one line and exit status 2.
    """

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block), for :func:`main`.

    A missing sub-command (``specdsl``, ``specdsl cache``) lists the choices."""

    def error(self, message: str) -> Any:  # argparse's hook: print usage, exit 2
        sub = _subcommands(self)
        if sub is not None and message.endswith(f"required: {sub.metavar}"):
            message += f" ({', '.join(sub.choices)})"
        raise UsageError(self.prog, message)


def _subcommands(parser: argparse.ArgumentParser) -> Any:
    """The action of ``parser``'s sub-commands (``choices``: their names), or None."""
    return next((action for action in parser._actions
                 if action.nargs == argparse.PARSER and action.choices), None)


class _DeprecatedGrid(argparse.Action):
    """``--grid``: the old spelling of ``--variants`` ("grid" is the CUDA launch grid)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog}: note: --grid is deprecated, use --variants (a spec's "
              "variants; 'grid' names the CUDA launch grid)", file=sys.stderr)
        setattr(namespace, self.dest, True)


def _lazy(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        handler: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f".{module}", __package__), function)
        return handler(args)
    return run


def _target(text: str) -> Target:
    try:
        return Target.parse(text)
    except SpecdslError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str, minimum: int = 0) -> int:
    """``text`` as an int >= ``minimum`` in ASCII digits alone (no sign, no ``_``, none of
    the other scripts' digits that ``str.isdigit`` takes)."""
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum} (got {text!r})")
    return int(text)


def _positive_count(text: str) -> int:
    return _count(text, 1)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every ``specdsl`` command.

    Each verb's parser has the defaults ``handler`` (called with the parsed arguments,
    returns the exit status), ``verb_parser`` (itself, for errors found later) and
    ``words`` (the name of the positional list that collects SPEC and field words, or
    ``None``): :func:`main` appends the words argparse leaves over to that list, which
    is what lets options follow the words.
    """
    parser = _Parser(prog="specdsl",
                     description="Render, key, prove, verify and run PTX kernel specs.")
    from .._version import __version__

    parser.add_argument("--version", action="version", version=f"specdsl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], help_: str,
                words: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(handler=handler, verb_parser=p, words=words)
        p.add_argument("--strict", action="store_true",
                       help="an UnreadFieldWarning (a baked field no template reads) is an "
                            "error (exit 2), for CI")
        return p

    def target(p: argparse.ArgumentParser, help_: str = "compile target, e.g. sm_90 or "
               "sm_90a (default sm_90)") -> None:
        p.add_argument("--target", type=_target, default=Target.parse("sm_90"), help=help_)

    def variants(p: argparse.ArgumentParser, help_: str) -> None:
        p.add_argument("--variants", action="store_true", help=help_)
        p.add_argument("--grid", action=_DeprecatedGrid, nargs=0, dest="variants",
                       help="deprecated spelling of --variants")

    request = "SPEC [FIELD=VALUE ...]"
    spec_help = "built-in name (rmsnorm), package.module:ClassName or path/file.py:ClassName"

    p = command("list", _lazy("keys", "command_list"),
                "list the built-in kernel specs, or each field of the SPECs named", "specs")
    p.add_argument("specs", nargs="*", metavar="SPEC", help=spec_help)
    p.add_argument("-v", "--verbose", action="store_true", help="show each field")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object a spec")

    p = command("render", _lazy("review", "command_render"),
                "print the PTX of one request", "request")
    p.add_argument("request", nargs="+", metavar=request, help=spec_help)
    target(p)
    p.add_argument("--out", metavar="DIR", type=render_folder_argument,
                   help="write one .ptx file per request into DIR (with a header comment) "
                        "and print the paths; with --out, more SPECs may follow the first")
    variants(p, "with --out: every variant of each spec, with the given fields pinned")

    p = command("key", _lazy("keys", "command_key"),
                "print a request's derived key (and hand-written key)", "request")
    p.add_argument("request", nargs="+", metavar=request, help=spec_help)
    target(p)
    p.add_argument("--explain", action="store_true",
                   help="also print every input of the derived key")
    p.add_argument("--json", action="store_true", help="print a JSON object")

    p = command("diff", _lazy("review", "command_diff"),
                "unified diff of the PTX of two requests: SPEC a=1 -- a=2", "request")
    p.usage = ("specdsl diff [--target T] [--target-b T] SPEC [FIELD=VALUE ...] "
               "[-- FIELD=VALUE ...]")
    p.epilog = ("Request B starts from A's values and applies the assignments after '--'. "
                "Exit 0: identical PTX; 1: different.")
    p.add_argument("request", nargs="*", metavar="SPEC ...",
                   help="SPEC, the fields of request A, '--', the fields of request B")
    target(p, "target of request A (default sm_90)")
    p.add_argument("--target-b", type=_target, default=None,
                   help="target of request B (default: --target)")

    p = command("verify", _lazy("review", "command_verify"),
                "compile with nvJitLink and report registers, spills and memory", "request")
    # nargs="*" adds the "...": the usage reads [SPEC [FIELD=VALUE ...] ...]
    p.add_argument("request", nargs="*", metavar=request,
                   help="requests to compile (default: every built-in spec's default)")
    target(p)
    variants(p, "every variant of each spec, with the given fields pinned")
    p.add_argument("--no-spills", action="store_true", help="fail on any register spill")
    p.add_argument("--max-registers", type=int, default=None, metavar="N",
                   help="fail when an entry uses more than N registers per thread")
    p.add_argument("--json", action="store_true",
                   help="print a JSON array, one object per request")
    # nvJitLink options (specdsl.CompileOptions, as Executor(compile_options=...))
    p.add_argument("--lineinfo", action="store_true",
                   help="compile with -lineinfo (line information for profilers)")
    p.add_argument("--maxrregcount", type=int, default=None, metavar="N",
                   help="compile with -maxrregcount=N: at most N registers per thread (24-255)")
    p.add_argument("-g", "--debug", action="store_true",
                   help="compile with -g (debug information; optimisation off)")

    p = command("check-keys", _lazy("keys", "command_check_keys"),
                "prove hand-written key() methods complete (static and sampled); "
                "exit 1 on an incomplete key", "modules")
    p.add_argument("modules", nargs="*", metavar="MODULE",
                   help="modules (or files, ./kernels.py) whose spec classes to check, or "
                        "MODULE:ClassName (default: specdsl.kernels)")
    p.add_argument("--samples", type=_count, default=200,
                   help="sampled request pairs per spec class (default 200; 0: static only)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled proof")
    target(p)
    p.add_argument("--json", action="store_true", help="print a JSON array, one object a class")

    p = command("run", _lazy("review", "command_run"),
                "run kernels on the GPU against a float64 NumPy reference, through each "
                "spec module's example(spec, rng, tokens)", "request")
    p.add_argument("request", nargs="*", metavar=request,
                   help="requests to run (default: every built-in spec's representative "
                        "request)")
    p.add_argument("--tokens", type=_positive_count, default=None, metavar="N",
                   help="tokens (rows) of each example; VectorAdd's: elements "
                        "(default: each example's own)")
    p.add_argument("--device", type=_count, default=0, metavar="D", help="CUDA device (default 0)")
    p.add_argument("--seed", type=_count, default=0, metavar="S", help="seed of the inputs")

    p = command("cache", _lazy("cache", "command_cache"),
                "show, prune or clear the disk cache (cubins, PTX, compiled templates)")
    from .cache import add_arguments as cache_arguments

    cache_arguments(p)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``, with options before or after the words, in every verb.

    Raises:
        UsageError: an unknown option or verb, a bad option value, a missing SPEC.
    """
    verb_at = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    verbs = _subcommands(parser).choices
    if verb_at is not None and "--" in argv[verb_at:]:
        if argv[verb_at] != "diff":  # argparse would drop it, merging two requests into one
            raise UsageError(f"{parser.prog} {argv[verb_at]}",
                             "'--' separates two requests in specdsl diff only")
        argv = list(argv)
        split = argv.index("--", verb_at)
        argv[split] = B_WORDS
        for i in range(split + 1, len(argv)):  # a --target among B's words is B's target
            if argv[i] == "--target" or argv[i].startswith("--target="):
                argv[i] = "--target-b" + argv[i][len("--target"):]
    if verb_at and argv[verb_at] not in verbs and argv[verb_at - 1].startswith("-"):
        option = argv[verb_at - 1]  # specdsl --target sm_90 key ...: an option's value
        raise UsageError(parser.prog, f"{option} {argv[verb_at]} comes before the COMMAND: "
                                      f"options go after it (specdsl COMMAND {option} "
                                      f"{argv[verb_at]} ...)")
    try:
        args, extras = parser.parse_known_args(argv)
    except UsageError:
        # only options, no COMMAND: name the unknown ones (argparse says COMMAND is missing)
        unknown = [word for word in argv if word.startswith("-") and word != "--"]
        if verb_at is None and unknown:
            raise UsageError(parser.prog, f"unrecognized arguments: {' '.join(unknown)} (and "
                                          f"no COMMAND: give one of "
                                          f"{', '.join(verbs)})") from None
        raise
    unknown = [word for word in extras if word.startswith("-") and word != B_WORDS]
    verb_parser = getattr(args, "verb_parser", parser)
    if unknown:
        raise UsageError(verb_parser.prog, f"unrecognized arguments: {' '.join(unknown)}")
    if extras:
        if getattr(args, "words", None) is None:
            raise UsageError(verb_parser.prog, f"unexpected words: {' '.join(extras)}")
        setattr(args, args.words, list(getattr(args, args.words)) + extras)
    return args


class _ClosedPipeGuard:
    """stdout for one command: a reader that goes away ends the output, not the command.

    As Python's documentation of ``signal`` advises ("Note on SIGPIPE"), a closed pipe
    points stdout at ``os.devnull``, so that nothing raises again at exit; the command
    then runs to its end and keeps its own exit status.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.closed = False

    def write(self, text: str) -> int:
        if not self.closed:
            try:
                written: int = self._stream.write(text)
                return written
            except BrokenPipeError:
                self._close()
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._close()

    def _close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _guarded_stdout() -> Iterator[None]:
    stream = sys.stdout
    guard = _ClosedPipeGuard(stream)
    sys.stdout = guard
    try:
        yield
        guard.flush()
    finally:
        sys.stdout = stream


def _error(prog: str, message: str) -> int:
    lines = str(message).strip().splitlines() or [""]
    print(f"{prog}: error: {lines[0]}", file=sys.stderr)
    return ERROR


def _run(args: argparse.Namespace) -> int:
    prog = args.verb_parser.prog
    try:
        check_environment()
        with warnings.catch_warnings():
            if args.strict:
                warnings.simplefilter("error", UnreadFieldWarning)
            status: int = args.handler(args)
            return status
    except UsageError as exc:
        return _error(exc.prog, str(exc))
    except UnsupportedTargetError as exc:  # the request in command-line words, not a repr
        if exc.request is None or exc.target is None:
            return _error(prog, str(exc))
        from .._review.requests import format_request  # only here: keeps `--help` light
        return _error(prog, f"{format_request(exc.request)} for {exc.target}: {exc.reason}")
    except SpecdslError as exc:
        return _error(prog, str(exc))
    except OSError as exc:  # an --out folder that cannot be written, a full disk
        return _error(prog, f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a traceback: one line that says where
        text = describe_exception(exc)
        if all(in_specdsl(frame.filename) for frame in traceback.extract_tb(exc.__traceback__)):
            text = f"internal error, a bug in specdsl (please report it): {text}"
        return _error(prog, text)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``specdsl`` console script and of ``python -m specdsl``.

    Args:
        argv: the words after ``specdsl`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 done, 1 a problem found, 2 a user error (one line on stderr).
        ``--help`` and ``--version`` return 0 too; nothing raises ``SystemExit``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    with _guarded_stdout(), one_line_warnings():
        apply_warning_options()
        try:
            args = _parse(build_parser(), argv)
        except UsageError as exc:
            return _error(exc.prog, str(exc))
        except SystemExit as exc:  # --help, --version
            return exc.code if isinstance(exc.code, int) else OK
        return _run(args)


if __name__ == "__main__":
    sys.exit(main())
