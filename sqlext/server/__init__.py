"""Network endpoints that run statements through sqlext for clients outside this process."""
