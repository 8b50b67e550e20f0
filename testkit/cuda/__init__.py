"""Helpers of the cuda wing's tests: real wheels' facts and the monitor's truth."""
