"""Compatibility name: the correctly rounded roots live in :mod:`slotopt.numerics.roots` (TensorFlow's arithmetic
in one place); the kernels keep importing them from here."""

from __future__ import annotations

from ..numerics.roots import pow, rsqrt, sqrt, sqrt_

__all__ = ["sqrt", "sqrt_", "rsqrt", "pow"]
