"""What a run leaves behind: checkpoint files, the run directory and its lock, logs.csv / meta.json / TensorBoard, episode set statistics, and the learning-curve plot."""
