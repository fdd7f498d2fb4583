"""The process: the server that builds and runs everything, its workers, signals and memory, and what it does
when a broker listener cannot open."""
