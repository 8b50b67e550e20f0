"""``python -m gpu_ci``: how the composite actions invoke the CLI."""

from gpu_ci.cli import main

raise SystemExit(main())
