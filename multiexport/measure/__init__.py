"""Measuring an artifact: trial inputs, tolerances, parity against jax.jit, latency, the reference itself."""
