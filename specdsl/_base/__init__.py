"""Helpers every layer may use: labelled SHA-256 digests, the cache-folder policy and
the wording of messages."""
