"""Accounting: energy, carbon, cost and FLOPs from stored readings, and their reference data."""
