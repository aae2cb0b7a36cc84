"""Configuration: the flags every entry point shares and their ranges, the env package interface, and the sizing of a run to the machine (torch-free: env servers parse the flags)."""
