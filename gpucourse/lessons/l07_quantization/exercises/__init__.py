"""Lesson 07's exercises: one module per exercise, each defining EXERCISE (found by gpucourse.grading.exercise)."""
