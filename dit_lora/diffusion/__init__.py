"""Diffusion training pieces shared by families (flow-matching tables, timestep sampling, loss weighting)."""
