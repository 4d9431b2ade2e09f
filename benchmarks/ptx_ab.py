"""A template change on the GPU: built-in requests rendered at a git revision, timed against
the same requests rendered from the working tree, in one process.

Two steps, since the GPU machine gets a copy of the working tree without its git history:

    python3 benchmarks/ptx_ab.py render --rev HEAD --out .ab/  # here: .ab/<n>.ptx, .ab/cases.json (git-ignored)
    python3 benchmarks/ptx_ab.py time --baseline .ab/          # GPU machine: ab.md under --out

``render`` checks the revision out in a temporary git worktree and renders :data:`CASES` there
(so the revision's own specdsl renders its own templates). ``time`` renders the same cases
from the working tree, launches both texts of each case through specdsl (:class:`Variants`
of ``benchmarks/cache_hints.py``: each text is its own request with its own derived key),
checks that both write the same output bits, and times them in alternating rounds (device
events, median, three input sets larger than L2), with the next kernel's 24 MB L2 re-read
beside each time (``cache_hints.time_and_reuse``). :data:`CASES` are the requests of issue
15's template changes and their neighbours: rows chunked through one CTA (two passes), where
the last chunk stays in the registers between the passes; Softmax rows in registers, where
rows of 6 to 8 vectors a thread keep their lines in L2 until the row max has read them;
RMSNormQuant's occupancy and packed maxima; RMSNorm rows in a window with the residual.
Each case renders at the revision from its fields; a field the revision's class lacks is
left out, so the revision renders its own default there (the block stays the tree's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import attrs  # noqa: E402

from specdsl.kernels import Fp8Quant, RMSNorm, RMSNormQuant, Softmax  # noqa: E402

#: (label, request, tokens): every case moves 0.5 GiB or more.
CASES = [
    ("Softmax 4096 x 131072 bf16", Softmax(cols=131072), 4096),
    ("Softmax 4096 x 200000 bf16", Softmax(cols=200000), 4096),
    ("Softmax 4096 x 131073 bf16", Softmax(cols=131073), 4096),
    ("Softmax 2048 x 131072 f32", Softmax(cols=131072, dtype="f32"), 2048),
    ("RMSNorm 4096 x 131072 bf16", RMSNorm(hidden=131072), 4096),
    ("RMSNorm 4096 x 200000 bf16", RMSNorm(hidden=200000), 4096),
    ("RMSNorm 4096 x 131073 bf16", RMSNorm(hidden=131073), 4096),
    ("RMSNorm 2048 x 131072 f32", RMSNorm(hidden=131072, dtype="f32"), 2048),
    ("RMSNorm + residual 4096 x 131072 bf16", RMSNorm(hidden=131072, fused_residual=True), 4096),
    ("Fp8Quant 4096 x 131072 bf16, dynamic", Fp8Quant(hidden=131072, scale_mode="dynamic"), 4096),
    ("Fp8Quant 4096 x 131073 bf16, dynamic", Fp8Quant(hidden=131073, scale_mode="dynamic"), 4096),
    ("Softmax 16384 x 8192 bf16", Softmax(cols=8192), 16384),
    ("Softmax 8192 x 12288 bf16", Softmax(cols=12288), 8192),
    ("Softmax 8192 x 16384 bf16", Softmax(cols=16384), 8192),
    ("Softmax 4096 x 24576 bf16", Softmax(cols=24576), 4096),
    ("Softmax 4096 x 32768 bf16", Softmax(cols=32768), 4096),
    ("Softmax 2048 x 65536 bf16", Softmax(cols=65536), 2048),
    ("Softmax 16384 x 8192 f32", Softmax(cols=8192, dtype="f32"), 16384),
    # RMSNormQuant's occupancy and packed maxima, and windowed rows with the residual
    # (docs/kernels/rmsnorm.md; against 5398c81, which has no min_ctas_per_sm: its default)
    ("RMSNormQuant 16384 x 7168 bf16, dynamic", RMSNormQuant(hidden=7168), 16384),
    ("RMSNormQuant 16384 x 7168 bf16, static", RMSNormQuant(hidden=7168, scale_mode="static"), 16384),
    ("RMSNormQuant 16384 x 7168 bf16, group", RMSNormQuant(hidden=7168, scale_mode="group"), 16384),
    ("RMSNormQuant 16384 x 7168 f16, dynamic", RMSNormQuant(hidden=7168, dtype="f16"), 16384),
    ("RMSNormQuant 16384 x 8192 bf16, dynamic", RMSNormQuant(hidden=8192), 16384),
    ("RMSNormQuant + residual 16384 x 7168 bf16, dynamic",
     RMSNormQuant(hidden=7168, fused_residual=True), 16384),
    ("RMSNorm + residual 16384 x 4097 bf16", RMSNorm(hidden=4097, fused_residual=True), 16384),
    ("RMSNorm + residual 8192 x 8191 bf16", RMSNorm(hidden=8191, fused_residual=True), 8192),
    ("RMSNorm + residual 16384 x 2049 bf16", RMSNorm(hidden=2049, fused_residual=True), 16384),
]

#: Run inside the revision's worktree: print each case's PTX as JSON ({label: text}). A case
#: is [label, class name, {field: value}]; a field the revision's class does not have yet
#: is left out, so the revision renders its own default there (the block stays pinned: both
#: texts launch with the working tree's geometry).
_RENDER = """
import json, sys
sys.path.insert(0, ".")
import attrs
import specdsl.kernels
from specdsl import render
def request(name, fields):
    cls = getattr(specdsl.kernels, name)
    known = attrs.fields_dict(cls)
    return cls(**{key: value for key, value in fields.items() if key in known})
cases = json.loads(sys.stdin.read())
print(json.dumps({label: render(request(name, fields)) for label, name, fields in cases}))
"""


def case_fields(spec: Any) -> dict[str, Any]:
    """``spec``'s fields as JSON values (a DType by its name), for :data:`_RENDER`."""
    return {field.name: getattr(value, "value", value) for field in attrs.fields(type(spec))
            for value in [getattr(spec, field.name)]}


def render_revision(rev: str, out: Path) -> list[str]:
    """Render :data:`CASES` at git revision ``rev`` into ``out`` (``<n>.ptx``, and
    ``cases.json``: each case's label and request); the labels.

    Raises:
        subprocess.CalledProcessError: ``rev`` is not a revision of this repository, or
            its specdsl cannot render a case.
    """
    root = Path(__file__).resolve().parent.parent
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specdsl-ab-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q", str(tree), rev],
                       check=True)
        try:
            cases = [(label, type(spec).__name__, case_fields(spec)) for label, spec, _ in CASES]
            done = subprocess.run([sys.executable, "-c", _RENDER], cwd=tree, check=True, text=True,
                                  input=json.dumps(cases), capture_output=True)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                           check=True)
    texts = json.loads(done.stdout)
    for number, (label, _, _) in enumerate(CASES):
        (out / f"{number}.ptx").write_text(texts[label])
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev], check=True,
                            text=True, capture_output=True).stdout.strip()
    (out / "cases.json").write_text(json.dumps({"rev": rev, "commit": commit, "cases": cases},
                                               indent=1) + "\n")
    return list(texts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    render_step = steps.add_parser("render", help="render the cases at a revision (needs git)")
    render_step.add_argument("--rev", default="HEAD", help="the git revision (default HEAD)")
    render_step.add_argument("--out", required=True, help="folder for <n>.ptx and cases.json")
    time_step = steps.add_parser("time", help="time a render step's PTX against the working tree's (GPU)")
    time_step.add_argument("--baseline", required=True, help="the render step's folder")
    time_step.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for ab.md")
    time_step.add_argument("--rounds", type=int, default=4, help="timed rounds, alternating order")
    time_step.add_argument("--launches", type=int, default=30, help="launches timed per round")
    time_step.add_argument("--match", default="", help="only the cases whose label holds this text")
    options = parser.parse_args(argv)
    if options.step == "render":
        for label in render_revision(options.rev, Path(options.out)):
            print(label)
        return 0

    baseline = Path(options.baseline)
    manifest = json.loads((baseline / "cases.json").read_text())
    if [case[0] for case in manifest["cases"]] != [label for label, _, _ in CASES]:
        raise SystemExit(f"{baseline}: rendered for other cases; run the render step again")
    import torch
    from cache_hints import Variants, time_texts
    from harness import Launcher

    from specdsl import render

    rev = manifest.get("commit", manifest["rev"])
    launcher = Launcher(torch)
    variant = Variants(Path(tempfile.mkdtemp(prefix="specdsl-ab-")))
    reused = torch.randn(24 * 2**20 // 4, device="cuda")   # 24 MB, under the 60 MB L2
    rows = [f"| case | {rev} us | working tree us | speed-up | L2 re-read after, us ({rev} / tree) | outputs |",
            "| --- | ---: | ---: | ---: | ---: | --- |"]
    for number, (label, spec, tokens) in enumerate(CASES):
        if options.match not in label:
            continue
        texts = {rev: (baseline / f"{number}.ptx").read_text(), "tree": render(spec)}
        found = time_texts(torch, launcher, variant, spec, tokens, texts, options.rounds,
                           options.launches, reused)
        before, after = found["us"][rev], found["us"]["tree"]
        rows.append(f"| {label} | {before:.1f} | {after:.1f} | {before / after:.3f}x | "
                    f"{found['reuse'][rev]:.2f} / {found['reuse']['tree']:.2f} | "
                    f"{'DIFFERENT' if found['differs'] else 'same bits'} |")
        print(rows[-1], flush=True)
    Path(options.out).mkdir(parents=True, exist_ok=True)
    (Path(options.out) / "ab.md").write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
