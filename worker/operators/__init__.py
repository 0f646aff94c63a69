"""Operators: the processors behind the DSL's compound operations, each owning its stores."""
