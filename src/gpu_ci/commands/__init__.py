"""One module per action: ``run(inputs, rt) -> exit code``, the shell around the core."""
