"""Spec definition: fields, dtypes, targets, the ``@kernel_spec`` decorator, requests as text."""
