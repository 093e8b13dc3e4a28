"""Callbacks that monitor a framework's training loop: steps, samples, tokens and the phases of
each step. One module per framework, each importing its framework only when imported itself:
``computewatch.integrations.lightning``, ``.huggingface``, ``.keras``."""
