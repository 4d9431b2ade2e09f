"""Templates: the Jinja environment that renders PTX, its filters, and what templates read."""
