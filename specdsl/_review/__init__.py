"""Review: variants, verification, renders and diffs, and the ``specdsl run`` demo."""
