"""FTRL-Proximal (l1, l2, l2 shrinkage, beta, learning-rate power)."""

from __future__ import annotations

import torch

__all__: list[str] = []

Tensors = list[torch.Tensor]
