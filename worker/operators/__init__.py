"""Operators the DSL compiles onto the Processor API, each owning its stores."""
