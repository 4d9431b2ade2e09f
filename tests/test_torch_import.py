"""Importing specdsl never imports torch; importing specdsl.torch starts no CUDA work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object, returned here."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_specdsl_does_not_import_torch():
    """`import specdsl` and `import specdsl.kernels` leave torch unimported."""
    seen = _child("import json, sys, specdsl, specdsl.kernels\n"
                  "print(json.dumps({'torch': 'torch' in sys.modules}))")
    assert seen == {"torch": False}


def test_import_specdsl_torch_starts_no_cuda_work():
    """`import specdsl.torch` registers the ops without initializing CUDA, importing
    cuda.core or any CUDA module torch itself did not, or building a request."""
    pytest.importorskip("torch")
    seen = _child(
        "import json, sys, torch\n"
        "before = {m for m in sys.modules if m == 'cuda' or m.startswith('cuda.')}\n"
        "import specdsl.torch as sd\n"
        "after = {m for m in sys.modules if m == 'cuda' or m.startswith('cuda.')}\n"
        "print(json.dumps({'new_cuda_modules': sorted(after - before),\n"
        "                  'cuda_initialized': torch.cuda.is_initialized(),\n"
        "                  'registered': hasattr(torch.ops.specdsl, 'rms_norm'),\n"
        "                  'requests': sd.specs.rms_norm.cache_info().currsize}))")
    assert seen == {"new_cuda_modules": [], "cuda_initialized": False, "registered": True,
                    "requests": 0}
