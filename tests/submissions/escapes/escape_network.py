"""Hostile: sends what it has to a server on the internet (and would fetch an answer from one). In the sandbox there
is no network: no route out, only its own loopback."""
import socket

socket.create_connection(("1.1.1.1", 53), timeout=5).close()
vector_add = None
