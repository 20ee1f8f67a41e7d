"""Shared test doubles (fakes) used by several test directories."""
