"""Pure-Python cost models: no TVM import here (see DESIGN.md)."""
