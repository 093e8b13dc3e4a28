"""Fleets: the node agent, job attribution, the Prometheus export and fleet reports."""
