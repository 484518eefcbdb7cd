"""Reports from results alone (no JAX, no backend): Markdown, HTML with plots, terminal rows, the
recommendation and the regression diff."""
