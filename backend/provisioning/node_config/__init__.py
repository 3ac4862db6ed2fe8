"""Configuring a node the way one configures a server: over a shell on it (SSH), never from the host."""
