"""Compiled-artifact store access for the operator: is a revision compiled, and where is it."""
