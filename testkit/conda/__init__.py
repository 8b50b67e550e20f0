"""Helpers of the conda wing's tests: lock files, jobs and installers."""
