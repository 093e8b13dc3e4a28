"""Profilers on demand and on anomaly: py-spy stack samples of a running run, the PyTorch
Profiler around chosen steps, cProfile and Nsight Systems, linked to the run."""
