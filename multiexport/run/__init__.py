"""Running artifacts in processes of their own: the one subprocess supervisor, workers, device probes."""
