"""Building a module on a miss: PTX and cubin from the disk cache, or rendered and compiled.

The rendered PTX comes from the disk cache when the request's derived key decides it
(:func:`~specdsl._render.render.renders_from_key`), else from :func:`specdsl.render`; the
cubin comes from the disk cache under a key over the derived key, the PTX, the target,
nvJitLink's options and version (:func:`~specdsl._runtime.diskcache.disk_key`), else from
nvJitLink. The request's array declarations are matched with the parsed ``.entry``
before anything is compiled (:func:`~specdsl._runtime.arraychecks.plan_arrays`), by every
executor, compile-only ones included. What is built is recorded in the ledger under a
hand-written key, and loaded on the device where the executor has one.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

from .._proof.ledger import KeyLedger
from .._render.keys import derived_key
from .._render.render import render, rendering_digest, renders_from_key
from .._spec.decorator import spec_info
from .._spec.target import Target
from .arraychecks import plan_arrays
from .compile import CompileOptions, compile_ptx, link_options, toolchain_version
from .diskcache import DiskCache, disk_key, ptx_key
from .modules import Module
from .signature import parse_entry

__all__ = ["Builder"]


class Builder:
    """Builds the modules of one target; its :meth:`build` is a module cache's miss.

    Args:
        target: what every module is compiled for.
        compile_options: nvJitLink's options (part of every disk-cache key).
        disk: the disk cache, or ``None``.
        ledger: records the PTX compiled under each hand-written key.
        load: loads a built module on the device (``None``: compile only).

    Attributes:
        misses, compiles, compile_seconds, disk_hits, ptx_disk_hits: the counters of
            :class:`~specdsl._runtime.executor.ExecutorStats`.
    """

    def __init__(self, target: Target, compile_options: CompileOptions, disk: DiskCache | None,
                 ledger: KeyLedger, load: Callable[[Module], None] | None) -> None:
        self.target = target
        self.compile_options = compile_options
        self.disk = disk
        self.ledger = ledger
        self.load = load
        self.misses = self.compiles = self.disk_hits = self.ptx_disk_hits = 0
        self.compile_seconds = 0.0
        self._lock = threading.Lock()

    def build(self, module_key: str, spec: Any, written: bool) -> Module:
        """The module of ``spec`` under ``module_key`` (``written``: a hand-written key).

        Raises:
            RenderError, CompileError: the request cannot be rendered or compiled.
            SpecDefinitionError: an array declaration names no ``.ptr`` parameter of the
                entry, or a dimension that is neither a baked int field nor an integer
                scalar ``.param`` (:func:`~specdsl._runtime.arraychecks.plan_arrays`).
            IncompleteKeyError: the hand-written key already holds other PTX (the ledger).
        """
        self.misses += 1
        info = spec_info(spec)
        derived = derived_key(spec, self.target)
        ptx = self._rendered(spec, derived)
        signature = parse_entry(ptx, info.entry)
        arrays = plan_arrays(spec, signature)  # once per module: the launcher reuses it
        cubin, log, from_disk, key_bytes = None, "", False, None
        if self.disk is not None:
            key_bytes = disk_key(derived_key=derived,
                                 ptx_sha256=hashlib.sha256(ptx.encode()).hexdigest(),
                                 target=self.target.sm,
                                 options=link_options(self.target, self.compile_options),
                                 toolchain=toolchain_version())
            cubin = self.disk.get(key_bytes)
            from_disk = cubin is not None
        if cubin is None:
            compiled = compile_ptx(ptx, self.target, spec=spec, options=self.compile_options)
            cubin, log = compiled.cubin, compiled.log
            with self._lock:
                self.compiles += 1
                self.compile_seconds += compiled.seconds
            if key_bytes is not None and self.disk is not None:
                self.disk.put(key_bytes, cubin)
        else:
            self.disk_hits += 1
        module = Module(key=module_key, derived_key=derived, spec=spec, target=self.target,
                        cubin=cubin, log=log, from_disk=from_disk, signature=signature,
                        arrays=arrays)
        if self.load is not None:
            self.load(module)
        if written:
            self.ledger.record(module_key, spec, self.target, ptx)
        return module

    def _rendered(self, spec: Any, derived: str) -> str:
        """``spec``'s PTX: from the disk cache when its derived key decides it, else rendered
        (and then stored there for the next process)."""
        if self.disk is None or not renders_from_key(spec):
            return render(spec, self.target)
        key = ptx_key(derived_key=derived, rendering=rendering_digest())
        ptx = self.disk.get_ptx(key)
        if ptx is not None:
            self.ptx_disk_hits += 1
            return ptx
        ptx = render(spec, self.target)
        self.disk.put_ptx(key, ptx)
        return ptx
