"""gpu-monitor: what the GPUs did during a job, and what it cost."""
