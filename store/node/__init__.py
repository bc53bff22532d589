"""The node runtime: ``refine node``'s scheduler, its worker processes and their forkserver."""
