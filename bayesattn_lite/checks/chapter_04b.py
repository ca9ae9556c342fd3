"""Checks of the coding exercises of chapter 4b (one check per exercise, on the engine of ``_engine``)."""

__all__ = []
