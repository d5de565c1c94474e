"""Typed partial decoding: JSON straight into dicts of only the fields gpu-guard reads."""
