"""Checking exercises: ``check()`` in notebooks (checker.py) and the isolated batch grader behind
``gpucourse grade`` (grader.py, worker.py, cli.py). compare.py, guards.py and launches.py are shared by both."""
