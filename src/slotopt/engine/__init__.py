"""Machinery shared by every optimizer generation: the step pipeline, state, sparse rows, clipping, constants."""
