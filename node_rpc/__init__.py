"""Calling the nodes' internal HTTP API: requests, their errors, the clients of write and
read nodes, the append body's frames and the directory that finds the nodes."""
