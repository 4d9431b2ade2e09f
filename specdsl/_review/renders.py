"""The review workflow as a library: renders to check in, and the PTX of two requests.

``specdsl render --out``, ``specdsl diff`` and ``specdsl verify`` (:mod:`specdsl._review.verify`)
are built on these functions; they need no GPU, so they run on a laptop or in CI. Each
returns data; the command line (:mod:`specdsl._cli.review`) prints it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from .._render.keys import derived_key
from .._render.render import render
from .._spec.decorator import spec_info
from .._spec.target import Target
from ..errors import UnsupportedTargetError
from .requests import format_request, format_value

__all__ = ["render_file_name", "render_file_text", "RenderFile", "write_renders", "PtxDiff",
           "diff_requests", "MAX_NAME"]


# --- render --out --------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")
#: File names longer than this drop their field part (the digest keeps them unique).
MAX_NAME = 120


def render_file_name(spec: Any, key: str) -> str:
    """A readable, unique file name: ``vectoradd-dtype_f16-3f1c2a9b4d5e.ptx``.

    The class name, each baked field as ``name_value``, and the first 12 hex digits
    of the derived key's digest (the full key is in the file's header).
    """
    info = spec_info(spec)
    digest = key.rsplit("-", 1)[-1][:12]
    parts = [f"{name}_{_UNSAFE.sub('_', format_value(getattr(spec, name)))}"
             for name in info.baked]
    stem = type(spec).__name__.lower()
    name = "-".join([stem, *parts, digest]) + ".ptx"
    if len(name) > MAX_NAME:
        name = f"{stem}-{digest}.ptx"
    return name


def render_file_text(spec: Any, target: Target, ptx: str, key: str) -> str:
    """The PTX with a header comment naming the spec, its baked fields, target and key."""
    info = spec_info(spec)
    lines = [
        "// Rendered by `specdsl render --out` for review; regenerate it, do not edit it.",
        f"// request:     {format_request(spec, baked_only=True)}",
        f"// spec class:  {info.cls_name} (template {info.template}, entry {info.entry})",
        f"// target:      {target.sm} (PTX ISA {target.ptx_isa})",
        f"// derived key: {key}",
        "",
    ]
    return "\n".join(lines) + ptx


@attrs.frozen
class RenderFile:
    """One request of :func:`write_renders`.

    Attributes:
        request: the request.
        key: its derived key for the target.
        path: the file written, or ``None`` when the request was skipped.
        skipped: why the target cannot run the request (its template's
            ``require_target``), or ``None``.
    """

    request: Any
    key: str
    path: Path | None
    skipped: str | None = None


def write_renders(requests: Iterable[Any], target: Target | str | int, out: str | os.PathLike[str]
                  ) -> list[RenderFile]:
    """Write one ``.ptx`` file per request into the folder ``out`` (created if missing).

    Each file is :func:`render_file_text` under :func:`render_file_name`. The output is a
    pure function of the requests, the templates and the target: rerunning it rewrites
    identical files, so a template change shows up as a diff in code review. Requests
    should have distinct derived keys (one file each). Files already in ``out`` are
    overwritten when their name comes again, never deleted.

    Returns:
        One :class:`RenderFile` per request, in order; a request the target cannot run is
        skipped (``path`` is ``None``), not written.

    Raises:
        RenderError: a request that does not render (other than for its target).
        OSError: ``out`` cannot be made a folder or a file cannot be written.
    """
    target = Target.parse(target)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for request in requests:
        key = derived_key(request, target)
        try:
            ptx = render(request, target)
        except UnsupportedTargetError as exc:  # a request this target cannot run
            written.append(RenderFile(request, key, None, exc.reason))
            continue
        path = folder / render_file_name(request, key)
        with open(path, "w", newline="\n") as stream:
            stream.write(render_file_text(request, target, ptx, key))
        written.append(RenderFile(request, key, path))
    return written


# --- diff ----------------------------------------------------------------------------------

@attrs.frozen
class PtxDiff:
    """The PTX of two requests (or of one request for two targets), side by side.

    Attributes:
        first, second: the two requests; ``target_a``, ``target_b``: their targets.
        key_a, key_b: their derived keys; ``ptx_a``, ``ptx_b``: their PTX.
    """

    first: Any
    second: Any
    target_a: Target
    target_b: Target
    key_a: str
    key_b: str
    ptx_a: str = attrs.field(repr=False)
    ptx_b: str = attrs.field(repr=False)

    @property
    def identical(self) -> bool:
        """True when the two requests render the same PTX."""
        return self.ptx_a == self.ptx_b


def diff_requests(first: Any, second: Any, target_a: Target | str | int = "sm_90",
                  target_b: Target | str | int | None = None) -> PtxDiff:
    """Render ``first`` for ``target_a`` and ``second`` for ``target_b`` (default: the same).

    Raises:
        RenderError: a request that does not render.
        TargetError: a malformed target string.
    """
    target_a = Target.parse(target_a)
    target_b = target_a if target_b is None else Target.parse(target_b)
    return PtxDiff(first, second, target_a, target_b, derived_key(first, target_a),
                   derived_key(second, target_b), render(first, target_a),
                   render(second, target_b))
