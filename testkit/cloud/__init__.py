"""Helpers of the cloud tests."""
