"""The camera inference app: sources, a drop-oldest threaded pipeline, tasks and outputs."""
