"""What proving a hit costs once it is proven: ``KeyLedger.prove`` against a dict lookup.

Pure CPU (no GPU, no compile): run it anywhere with ``python benchmarks/proven_hit.py``.
Each figure is the best of ``--repeat`` timings of ``--number`` calls, in nanoseconds per
call (the minimum is the least disturbed by other processes; see the timeit docs).

Rows:
  dict lookup             ``modules[key]``: the executor's cache lookup, the floor.
  prove, same request     the request object that was proven last (identity checks).
  prove, equal request    an equal request built anew at each call (its baked values are
                          compared with the last proven request's); the row below is the
                          cost of building the request alone, paid by the caller anyway.
  prove, alternating pair two proven requests with different derived keys alternating
                          (derived-key lookup, a miss on the last-proven string, a set
                          lookup).
  checking_enabled()      the switch the executor reads on every hit.
  proof_suspended()       the other switch.
  record (10 KB PTX)      a miss's bookkeeping: derived key, SHA-256 of the PTX, insert.
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specdsl import (
    DType,
    KeyLedger,
    baked,
    checking_enabled,
    kernel_spec,
    launch,
    proof_suspended,
    render,
)
from specdsl._spec.target import Target


@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class KeyedAdd:
    """VectorAdd's template under a hand-written key (complete: dtype is in it).

    ``tag`` is baked but the template never reads it: requests differing in ``tag`` have
    different derived keys and the same PTX, so both are proven under one key.
    """

    dtype: DType = baked(DType.F32)
    tag: int = baked(0)
    block: int = launch(256)

    def key(self) -> str:
        return f"add-{self.dtype.ptx}"


def best_ns(statement, number: int, repeat: int) -> float:
    """The best per-call time of ``statement`` (a callable), in nanoseconds."""
    return min(timeit.repeat(statement, number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    target = Target.parse("sm_90")
    first = KeyedAdd(block=256)
    other = KeyedAdd(tag=1)  # same PTX, another derived key
    ledger = KeyLedger()
    ledger.record("add-f32", first, target, render(first, target))
    ledger.prove("add-f32", other, target)
    modules = {f"key-{i}": i for i in range(1000)} | {"add-f32": object()}

    def alternate(ledger=ledger, a=first, b=other, t=target):
        ledger.prove("add-f32", a, t)
        ledger.prove("add-f32", b, t)

    ptx = render(first, target)
    ptx10k = (ptx * (10_240 // len(ptx) + 1))[:10_240]
    n, r = args.number, args.repeat
    rows = [
        ("dict lookup", best_ns(lambda m=modules: m["add-f32"], n, r)),
        ("prove, same request", best_ns(lambda: ledger.prove("add-f32", first, target), n, r)),
        ("prove, equal request", best_ns(
            lambda: ledger.prove("add-f32", KeyedAdd(block=256), target), n // 4, r)),
        ("  (building the request)", best_ns(lambda: KeyedAdd(block=256), n // 4, r)),
        ("prove, alternating pair", best_ns(alternate, n // 2, r) / 2),
        ("checking_enabled()", best_ns(checking_enabled, n, r)),
        ("proof_suspended()", best_ns(proof_suspended, n, r)),
        ("record (10 KB PTX)", best_ns(
            lambda: KeyLedger().record("add-f32", first, target, ptx10k), n // 20, r)),
    ]
    print(f"python {platform.python_version()} on {platform.machine()}, "
          f"best of {r} x {n} calls")
    for label, ns in rows:
        print(f"  {label:26s} {ns:8.0f} ns/call")


if __name__ == "__main__":
    main()
