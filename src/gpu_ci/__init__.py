"""gpu-ci-actions: reusable GitHub Actions for projects whose CI needs GPUs."""

__version__ = "0.1.0"
