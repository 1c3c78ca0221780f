"""Adagrad and its proximal and dual-averaging relatives."""

from __future__ import annotations

import torch

__all__: list[str] = []

Tensors = list[torch.Tensor]
