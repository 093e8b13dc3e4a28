"""Benchmarking: MLPerf-style inference scenarios on MLCommons LoadGen, model against model,
scaling sweeps and resource gates for CI, each benchmark a stored run."""
