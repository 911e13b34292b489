"""Training: treatments, the self-evolution loop, MSV, CrossFit, audit and replay (see the open issues)."""
