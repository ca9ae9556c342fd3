"""Checks of the coding exercises of chapter 9 (one check per exercise, on the engine of ``_engine``)."""

__all__ = []
