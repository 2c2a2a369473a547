"""`gtr-keras check`: every directory gtr-keras writes, verified file by file (one checker per kind)."""
