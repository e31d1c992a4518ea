"""Pick where the book's cells run: CUDA, then Apple MPS, then the CPU (as training)."""
from ..training.device import pick_device, pick_dtype

__all__ = ["pick_device", "pick_dtype"]
