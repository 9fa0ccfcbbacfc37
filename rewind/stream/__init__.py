"""Running a stream: the transform contract, the runner, late routing, status."""
