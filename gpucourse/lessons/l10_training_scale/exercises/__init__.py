"""Lesson 10's exercises: memory_budget and ring_all_reduce."""
