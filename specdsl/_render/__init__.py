"""Rendering and keys: a request to PTX text, and the module key derived from it."""
