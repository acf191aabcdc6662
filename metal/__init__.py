"""Kernel sources (metal/ in the repository), shipped as package data."""
