"""Proof of hand-written keys: the checking switch, the ledger, static and sampled proofs."""
