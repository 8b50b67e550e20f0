"""Self-hosted runner registrations: just-in-time runners for one job, listed and removed."""
