"""Lesson 09's exercises: fused_rmsnorm_residual and read_the_profile."""
