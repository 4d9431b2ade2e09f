"""Proof of hand-written keys: the checking switch, the run-time ledger, static and sampled proofs."""
