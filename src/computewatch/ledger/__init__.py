"""The tamper-evident ledger's format: canonical JSON, the hash chain, Ed25519 signatures of
checkpoints and of usage reports, JSON Lines export, and verification that needs nothing but an
export and a public key (docs/ledger.md)."""
