"""Agents on other hosts: the host registry, the SSH connection to each host, and `check`,
which says what a host has and what it still needs before cao can run agents there."""
