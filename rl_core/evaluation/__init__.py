"""Whole episodes with a frozen model (validation, the final test, eval-only runs) and their videos."""
