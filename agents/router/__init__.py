"""Routing: decide cheaply, and visibly, what answers a message."""
