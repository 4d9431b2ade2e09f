"""The built-in kernels: LLM-inference spec classes, each rendered from ``templates/``."""

from .vector_add import VectorAdd

#: Every built-in spec class, in the order ``specdsl list`` shows them.
ALL = (VectorAdd,)

__all__ = ["VectorAdd", "ALL"]
