"""Test helper for specdsl.torch on a GPU: record the requests the ops launch."""

from __future__ import annotations

from typing import Any


def record_launches(monkeypatch: Any) -> list:
    """The requests (spec instances) ``specdsl.torch``'s ops launch from now on, in order;
    each launch still runs."""
    from specdsl.torch import _runtime

    requests: list = []
    real = _runtime.launch

    def recording(plan: Any, *args: Any, **kwargs: Any) -> Any:
        requests.append(plan.spec)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(_runtime, "launch", recording)
    return requests
