"""Spec classes with hand-written keys, shared by the tests (``handkeyed:Legacy`` in the CLI)."""

from specdsl import DType, baked, kernel_spec, launch
from userspecs import TEMPLATES


@kernel_spec(template="legacy.ptx.j2", entry="legacy", template_dir=TEMPLATES)
class Legacy:
    """A legacy spec whose key() holds ``n`` only: incomplete on purpose (misses ``scale``)."""

    n: int = baked(64)
    scale: float = baked(1.0)
    block: int = launch(128)

    def key(self) -> str:
        return f"legacy-{self.n}"


@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class HandKeyedAdd:
    """VectorAdd's template under a legacy key that forgets the dtype (on purpose)."""

    dtype: DType = baked(DType.F32)
    block: int = launch(256)

    def key(self) -> str:
        return "vadd"
