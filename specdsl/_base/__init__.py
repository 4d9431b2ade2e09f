"""Helpers every layer may use: labelled SHA-256 digests and the cache-folder policy."""
