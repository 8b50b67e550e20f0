"""gpu-lease: whole GPUs of a shared host, one job each."""
