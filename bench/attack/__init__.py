"""Round two of the API attack (issue 33): one module per item, each with `run(ctx)`."""
