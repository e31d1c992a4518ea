"""MiniMind Annotated: the real MiniMind model, one module per chapter of the book."""
from .config import MiniMindConfig
from .model import MiniMindForCausalLM, MiniMindModel

__all__ = ["MiniMindConfig", "MiniMindForCausalLM", "MiniMindModel"]
