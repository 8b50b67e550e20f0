"""gpu-ci-actions: reusable GitHub Actions for projects whose CI needs GPUs."""

#: The release version: the single source (pyproject.toml and scripts/bootstrap.py read it).
__version__ = "2.1.0"
