"""Compute governance over the server database: what each model's training used (lineage and
cumulative compute by method), thresholds and their deadlines, the ledger's table, and accounts."""
