"""Training-run detection: classify a job as training, inference or other from its GPU
telemetry alone, with a probability and the evidence."""
