"""Lesson 06's exercises: GEMM waves, choosing a tile, an FP8 matmul in Triton."""
