"""GPU telemetry written by other tools (nvidia-smi CSV logs, long CSV/Parquet): readers, and
import as a stored run."""
