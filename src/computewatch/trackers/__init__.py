"""Logging runs into the experiment trackers people already use (MLflow, W&B, TensorBoard,
Neptune), the reproducibility record, and model cards."""
