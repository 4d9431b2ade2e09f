"""The ``specdsl`` command line (argparse). Run ``specdsl --help``.

Every command turns a specdsl error into one line on stderr and exit status 2;
``diff`` exits 1 when the two renders differ, ``check-keys`` and ``verify`` exit 1
when they find a problem.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Sequence

from .errors import SpecdslError
from .keys import derived_key, hand_key
from .render import render
from .requests import builtin_specs, parse_request, resolve_spec
from .spec import spec_info
from .target import Target

__all__ = ["main", "build_parser"]


def _cmd_list(args: argparse.Namespace) -> int:
    import attrs

    for name, cls in sorted(builtin_specs().items()):
        info = spec_info(cls)
        print(f"{name:10s} {info.template:22s} entry {info.entry}")
        if args.verbose:
            for f in attrs.fields(cls):
                if f.default is attrs.NOTHING:
                    default = ""
                elif isinstance(f.default, attrs.Factory):
                    default = " = (computed from the other fields)"
                else:
                    default = f" = {f.default!r}"
                doc = f.metadata.get("specdsl.doc") or ""
                print(f"    {f.metadata['specdsl.role']:6s} {f.name}{default}  {doc}")
    return 0


def _request(args: argparse.Namespace) -> Any:
    return parse_request(resolve_spec(args.spec), args.fields)


def _cmd_render(args: argparse.Namespace) -> int:
    if args.out or args.grid:
        from .review import write_renders

        return write_renders(args)
    sys.stdout.write(render(_request(args), args.target))
    return 0


def _cmd_key(args: argparse.Namespace) -> int:
    spec = _request(args)
    print(f"derived: {derived_key(spec, args.target)}")
    written = hand_key(spec)
    if written is not None:
        print(f"hand-written: {written}")
    return 0


def _lazy(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(f"specdsl.{module}"), function)(args)
    return run


def _target(text: str) -> Target:
    try:
        return Target.parse(text)
    except SpecdslError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every ``specdsl`` command."""
    parser = argparse.ArgumentParser(
        prog="specdsl", description="Render, key, prove, verify and run PTX kernel specs.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"specdsl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(handler=handler)
        return p

    def request_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("spec", metavar="SPEC",
                       help="built-in name (rmsnorm) or package.module:ClassName")
        p.add_argument("fields", nargs="*", metavar="FIELD=VALUE")
        p.add_argument("--target", type=_target, default=Target.parse("sm_90"),
                       help="compile target, e.g. sm_90 or sm_90a (default sm_90)")

    p = command("list", _cmd_list, "list the built-in kernel specs")
    p.add_argument("-v", "--verbose", action="store_true", help="show each field")

    p = command("render", _cmd_render, "print the PTX of one request")
    request_args(p)
    p.add_argument("--out", metavar="DIR",
                   help="write one .ptx file per request into DIR (with a header comment) "
                        "and print the paths; with --out, more SPECs may follow the first")
    p.add_argument("--grid", action="store_true",
                   help="with --out: every request of each spec's grid (its 'variants'), "
                        "with the given fields pinned")

    p = command("key", _cmd_key, "print a request's derived key (and hand-written key)")
    request_args(p)

    p = command("diff", _lazy("review", "command_diff"),
                "unified diff of the PTX of two requests: SPEC a=1 -- a=2")
    p.usage = ("specdsl diff [--target T] [--target-b T] SPEC [FIELD=VALUE ...] "
               "[-- FIELD=VALUE ...]")
    p.epilog = ("Request B starts from A's values and applies the assignments after '--'. "
                "Options may also follow SPEC. Exit 0: identical PTX; 1: different.")
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="SPEC ...",
                   help="SPEC, the fields of request A, '--', the fields of request B")
    p.add_argument("--target", type=_target, default=Target.parse("sm_90"),
                   help="target of request A (default sm_90)")
    p.add_argument("--target-b", type=_target, default=None,
                   help="target of request B (default: --target)")

    p = command("verify", _lazy("review", "command_verify"),
                "compile with nvJitLink and report registers, spills and memory")
    p.add_argument("specs", nargs="*", metavar="SPEC [FIELD=VALUE ...]",
                   help="requests to compile (default: every built-in spec's default)")
    p.add_argument("--target", type=_target, default=Target.parse("sm_90"),
                   help="compile target (default sm_90)")
    p.add_argument("--grid", action="store_true",
                   help="every request of each spec's grid, with the given fields pinned")
    p.add_argument("--no-spills", action="store_true", help="fail on any register spill")
    p.add_argument("--max-registers", type=int, default=None, metavar="N",
                   help="fail when an entry uses more than N registers per thread")
    p.add_argument("--json", action="store_true",
                   help="print a JSON array, one object per request")
    # nvJitLink options (specdsl.compile.CompileOptions, as Executor(compile_options=...))
    p.add_argument("--lineinfo", action="store_true",
                   help="compile with -lineinfo (line information for profilers)")
    p.add_argument("--maxrregcount", type=int, default=None, metavar="N",
                   help="compile with -maxrregcount=N: at most N registers per thread (24-255)")
    p.add_argument("-g", "--debug", action="store_true",
                   help="compile with -g (debug information; optimisation off)")

    def count(text: str) -> int:
        if not text.isdigit():
            raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (got {text!r})")
        return int(text)

    p = command("check-keys", _lazy("analysis", "command_check_keys"),
                "prove hand-written key() methods complete (static and sampled); "
                "exit 1 on an incomplete key")
    p.add_argument("modules", nargs="*", metavar="MODULE",
                   help="modules whose spec classes to check, or package.module:ClassName "
                        "(default: specdsl.kernels)")
    p.add_argument("--samples", type=count, default=200,
                   help="sampled request pairs per spec class (default 200; 0: static only)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled proof")
    p.add_argument("--target", type=_target, default=Target.parse("sm_90"))

    p = command("run", _lazy("demo", "command_run"),
                "run each built-in kernel on the GPU against a float64 NumPy reference")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)

    p = command("cache", _lazy("cachecli", "command_cache"),
                "show, prune or clear the disk cache (cubins, PTX, compiled templates)")
    from .cachecli import add_arguments as cache_arguments

    cache_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``specdsl`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    # As under ``python -m``: user modules in the current folder resolve (``mymod:MySpec``).
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)
    try:
        return args.handler(args)
    except SpecdslError as exc:
        print(f"specdsl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
