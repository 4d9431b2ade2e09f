"""The module cache: one compiled module per key, built once however many threads ask.

:class:`ModuleCache` keys modules by ``(hand-written?, module key)``; a miss is built by
the builder it is given (:mod:`specdsl._runtime.builds`) with a single flight: the first
thread to ask builds, the others wait for its result, and a failed build raises in every
waiting thread and is not cached. On a hit under a hand-written key, while the checking
switch is on, the ledger proves that the request renders the PTX compiled under that key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import attrs

from .._proof.ledger import KeyLedger
from .._proof.switch import checking_enabled, proof_suspended
from .._render.keys import derived_key, hand_key
from .._spec.target import Target
from ..errors import ConfigError
from .arraychecks import ArrayCheck
from .geometry import NO_GEOMETRY, Geometry, LastGeometry
from .params import ArgumentPacker
from .signature import EntrySignature

__all__ = ["Module", "ModuleCache", "Build"]

@attrs.define(eq=False, repr=False)
class Module:
    """One compiled (and, with a device, loaded) module.

    Attributes:
        key: the module key it is cached under (derived or hand-written).
        derived_key: the derived key of the request that built it.
        spec: that request.
        target: what it was compiled for.
        cubin: the ELF cubin.
        log: nvJitLink's info log (empty for a cubin from the disk cache).
        from_disk: whether the cubin came from the disk cache.
        signature: the kernel's parsed ``.entry`` parameters.
        arrays: the checks of its declared arrays, one (or ``None``) per parameter, planned
            once when it is built (:func:`~specdsl._runtime.arraychecks.plan_arrays`).
        kernel: the cuda.core ``Kernel``, or ``None`` in a compile-only executor.
    """

    key: str
    derived_key: str
    spec: Any
    target: Target
    cubin: bytes
    log: str
    from_disk: bool
    signature: EntrySignature
    arrays: tuple[ArrayCheck | None, ...]
    kernel: Any = None
    # launch state, set up once when the module is loaded
    packer: ArgumentPacker | None = None
    function: int = 0
    kernel_threads: int | None = None
    static_shared: int = 0
    cluster: tuple[int, int, int] = (1, 1, 1)  # compile-time cluster shape, in CTAs
    dynamic_shared_set: int = 0
    geometries: dict[tuple[Any, ...], Geometry] = attrs.Factory(dict)
    # fire(args, streams, geometry): the launcher (compiled or generated) that checks the
    # arguments and launches (specdsl._runtime.launchers)
    fire: Any = None
    through_core: bool = False  # fire launches through cuda.core (else cuLaunchKernel)
    configs: dict[tuple[int, ...], Any] = attrs.Factory(dict)  # checked geometry -> LaunchConfig
    last_geometry: LastGeometry = NO_GEOMETRY  # replaced as one object

    def __repr__(self) -> str:
        return (f"<Module {self.key} entry={self.signature.entry} target={self.target.sm} "
                f"cubin={len(self.cubin)} bytes{' (disk)' if self.from_disk else ''}>")


#: ``build(module_key, spec, written) -> Module``: what a miss runs (once per key).
Build = Callable[[str, Any, bool], Module]


class ModuleCache:
    """Modules by key for one target; thread-safe.

    Args:
        target: the target every module is compiled for.
        ledger: proves hand-written keys on hits.
        build: builds the module of a miss (:meth:`specdsl._runtime.builds.Builder.build`).

    Attributes:
        hits: lookups answered from memory (counted without a lock: concurrent lookups
            can undercount slightly).
    """

    def __init__(self, target: Target, ledger: KeyLedger, build: Build) -> None:
        self.target = target
        self.ledger = ledger
        self.build = build
        self.hits = 0
        # keyed by (hand-written?, module key): a hand-written key that happens to spell
        # a derived key never reaches the module built under that derived key
        self._modules: dict[tuple[bool, str], Module] = {}
        self._pending: dict[tuple[bool, str], Future[Module]] = {}
        self._lock = threading.Lock()

    def module_key(self, spec: Any, key: str | None) -> tuple[str, bool]:
        """``(the key spec is cached under, whether it is hand-written)``: ``key``, else the
        spec's ``key()``, else its derived key.

        Raises:
            ConfigError: ``key`` is not a str with a non-blank character (nothing is
                launched yet: an argument refused, as ``cache_dir=1`` is).
            NotASpecError: ``spec`` is no request (a spec class, or no kernel spec).
        """
        if key is not None:
            if type(key) is not str or not key.strip():
                raise ConfigError(f"key must be a non-blank str, or None for the spec's key() "
                                  f"or its derived key (got {key!r})")
            return key, True
        written = hand_key(spec)
        if written is not None:
            return written, True
        return derived_key(spec, self.target), False

    def ensure(self, spec: Any, key: str | None = None) -> Module:
        """The module for ``spec``, built on the first request (see the module docstring).

        Raises:
            IncompleteKeyError: the hand-written key was first compiled for a request
                whose PTX differs from ``spec``'s.
            RenderError, CompileError: the request cannot be rendered or compiled.
            SpecDefinitionError: its array declarations do not match the entry.
            NotASpecError: ``spec`` is no request (a spec class, or no kernel spec).
        """
        module_key, written = self.module_key(spec, key)
        module = self._modules.get((written, module_key))
        if module is None:
            module = self._build_once(module_key, spec, written)
            if module.spec is spec:
                return module
        else:
            self.hits += 1
        if written and checking_enabled() and not proof_suspended():
            self.ledger.prove(module_key, spec, self.target)
        return module

    def _build_once(self, module_key: str, spec: Any, written: bool) -> Module:
        slot = (written, module_key)
        with self._lock:
            module = self._modules.get(slot)
            if module is not None:
                self.hits += 1
                return module
            pending = self._pending.get(slot)
            if pending is None:  # this thread builds; later ones wait for its future
                future: Future[Module] = Future()
                self._pending[slot] = future
        if pending is not None:
            self.hits += 1
            return pending.result()
        try:
            module = self.build(module_key, spec, written)
        except BaseException as exc:
            with self._lock:
                del self._pending[slot]
            future.set_exception(exc)
            raise
        with self._lock:
            self._modules[slot] = module
            del self._pending[slot]
        future.set_result(module)
        return module
