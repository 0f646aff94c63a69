"""Unit tests of the runtime package."""
