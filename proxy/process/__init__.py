"""The process: the server that builds and runs everything, its services, workers, signals and memory."""
