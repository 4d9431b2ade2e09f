"""Runtime: compile, disk cache, launch checks, module cache and launches (the executor)."""
