"""Lesson 08's exercises: online_softmax and flash_attention."""
