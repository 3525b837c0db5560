"""An independent replayer of ocelli's conformance vectors (docs/conformance.md)."""
