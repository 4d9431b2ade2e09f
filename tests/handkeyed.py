"""A user module with a hand-written key, for CLI tests (``handkeyed:Legacy``)."""

from specdsl import baked, kernel_spec, launch

from userspecs import TEMPLATES


@kernel_spec(template="legacy.ptx.j2", entry="legacy", template_dir=TEMPLATES)
class Legacy:
    """A legacy spec whose key() holds ``n`` only: incomplete on purpose (misses ``scale``)."""

    n: int = baked(64)
    scale: float = baked(1.0)
    block: int = launch(128)

    def key(self) -> str:
        return f"legacy-{self.n}"
