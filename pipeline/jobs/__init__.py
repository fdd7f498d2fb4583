"""The pipeline's jobs, each a function a notebook can call and a `sluice pipeline <job>` command."""
