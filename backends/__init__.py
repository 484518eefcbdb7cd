"""Built-in backends, installed as `multiexport.backends`: one module per export format."""
