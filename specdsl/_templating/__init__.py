"""Templates: the Jinja environment that renders PTX, its filters, and static facts about templates."""
