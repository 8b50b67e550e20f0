"""Helpers of the github wing's tests: runs, jobs and the CLI against the fake."""
