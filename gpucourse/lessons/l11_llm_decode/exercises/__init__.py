"""Lesson 11's exercises: decode_attention and tokens_per_second_floor."""
