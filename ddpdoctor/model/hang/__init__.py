"""The hang diagnosis: each rank's evidence, what it waits on, and the verdict."""
